//! How results reach the terminal: `-o table|json|yaml`, colors, and aligned tables.

use std::io::{self, IsTerminal as _, Write as _};

use clap::ValueEnum;
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Table,
    Json,
    Yaml,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ColorMode {
    Auto,
    Always,
    Never,
}

impl ColorMode {
    /// `auto` colors only a terminal, and respects the NO_COLOR convention.
    pub fn enabled(self, is_terminal: bool, no_color_set: bool) -> bool {
        match self {
            Self::Always => true,
            Self::Never => false,
            Self::Auto => is_terminal && !no_color_set,
        }
    }
}

/// Whether text is painted; table renderers take it so they stay pure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Style {
    pub color: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tone {
    Plain,
    Good,
    Bad,
}

impl Style {
    #[cfg(test)]
    pub const PLAIN: Self = Self { color: false };

    /// Painted text with its colour codes written as `<green>`, `<red>` and `</>`, so a test
    /// can pin a coloured rendering in a readable literal.
    #[cfg(test)]
    pub fn shown(painted: &str) -> String {
        painted
            .replace("\x1b[32m", "<green>")
            .replace("\x1b[31m", "<red>")
            .replace("\x1b[0m", "</>")
    }

    pub fn paint(self, text: &str, tone: Tone) -> String {
        let code = match tone {
            Tone::Good => "32",
            Tone::Bad => "31",
            Tone::Plain => return text.to_owned(),
        };
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }
}

/// Writes one result to stdout in the format the user asked for.
pub struct Printer {
    format: OutputFormat,
    style: Style,
}

impl Printer {
    pub fn new(format: OutputFormat, color: ColorMode) -> Self {
        let color = color.enabled(
            io::stdout().is_terminal(),
            std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()),
        );
        Self {
            format,
            style: Style { color },
        }
    }

    pub fn format(&self) -> OutputFormat {
        self.format
    }

    pub fn style(&self) -> Style {
        self.style
    }

    pub fn print<T: Serialize>(
        &self,
        view: &T,
        table: impl FnOnce(&T, Style) -> String,
    ) -> anyhow::Result<()> {
        let text = render(self.format, self.style, view, table)?;
        write_flushed(&text)
    }

    /// Writes one result of a series (a watch), flushed at once so a pipe sees it whole.
    /// `header` (e.g. the time) heads each table; see [`series_separator`].
    pub fn print_next<T: Serialize>(
        &self,
        first: bool,
        header: &str,
        view: &T,
        table: impl FnOnce(&T, Style) -> String,
    ) -> anyhow::Result<()> {
        let mut text = series_separator(self.format, first, header);
        text.push_str(&render(self.format, self.style, view, table)?);
        write_flushed(&text)
    }
}

/// Text for a terminal: what agents, registries and API servers say (condition messages, error
/// text, names in other clusters) may carry control characters that move the cursor, retitle
/// the window or rewrite a line (`\r`, `ESC ]`, `ESC [2J`), so every control character except
/// newline and tab is shown escaped (`\u{1b}`). The color codes [`Style::paint`] writes
/// (`ESC [` digits `m`) pass: they change colors only.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    if !text
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
    {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if c == '\u{1b}'
            && let Some(len) = sgr_len(rest)
        {
            out.push_str(&rest[..len]);
            rest = &rest[len..];
            continue;
        }
        if c.is_control() && c != '\n' && c != '\t' {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
        rest = &rest[c.len_utf8()..];
    }
    std::borrow::Cow::Owned(out)
}

/// The length of a color code (`ESC [` up to 8 digits or `;`, then `m`) at the start of `text`.
fn sgr_len(text: &str) -> Option<usize> {
    let params = text.strip_prefix("\u{1b}[")?;
    let end = params.find('m')?;
    (end <= 8
        && params[..end]
            .bytes()
            .all(|b| b.is_ascii_digit() || b == b';'))
    .then_some(end + 3)
}

fn write_flushed(text: &str) -> anyhow::Result<()> {
    let mut stdout = io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()?;
    Ok(())
}

/// What goes before each result of a series, as kubectl's `-w` does: tables each under a
/// header line and apart by a blank line, YAML documents apart by `---`, JSON documents
/// simply one after another (a JSON reader finds where each ends).
pub fn series_separator(format: OutputFormat, first: bool, header: &str) -> String {
    match (format, first) {
        (OutputFormat::Table, true) => format!("{header}\n"),
        (OutputFormat::Table, false) => format!("\n{header}\n"),
        (OutputFormat::Yaml, false) => "---\n".to_owned(),
        (OutputFormat::Yaml, true) | (OutputFormat::Json, _) => String::new(),
    }
}

pub fn render<T: Serialize>(
    format: OutputFormat,
    style: Style,
    view: &T,
    table: impl FnOnce(&T, Style) -> String,
) -> anyhow::Result<String> {
    Ok(match format {
        OutputFormat::Table => printable(&table(view, style)).into_owned(),
        OutputFormat::Json => {
            let mut text = serde_json::to_string_pretty(view)?;
            text.push('\n');
            text
        }
        OutputFormat::Yaml => tenantflux_core::yaml::to_string(view)?,
    })
}

/// Windows' ERROR_PIPE_NOT_CONNECTED: a write to a pipe whose reader has gone (`| head`) can
/// fail with it (wine reports it where Windows says ERROR_NO_DATA), and std maps only
/// ERROR_BROKEN_PIPE and ERROR_NO_DATA to [`io::ErrorKind::BrokenPipe`].
const ERROR_PIPE_NOT_CONNECTED: i32 = 233;

/// Whether the error is stdout having been closed by the reader (`| head`).
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<io::Error>()
            .is_some_and(is_closed_pipe)
    })
}

fn is_closed_pipe(err: &io::Error) -> bool {
    err.kind() == io::ErrorKind::BrokenPipe
        || (cfg!(windows) && err.raw_os_error() == Some(ERROR_PIPE_NOT_CONNECTED))
}

/// A table cell: its text, and how it is painted when colors are on.
pub struct Cell {
    pub text: String,
    pub tone: Tone,
}

impl Cell {
    pub fn plain(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            tone: Tone::Plain,
        }
    }

    pub fn toned(text: impl Into<String>, tone: Tone) -> Self {
        Self {
            text: text.into(),
            tone,
        }
    }
}

/// Columns aligned the way kubectl aligns them (three spaces apart), each line indented.
/// Widths come from the unpainted text, so colors never shift a column.
pub fn table(indent: &str, headers: &[&str], rows: &[Vec<Cell>], style: Style) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            let len = cell.text.chars().count();
            match widths.get_mut(i) {
                Some(w) => *w = (*w).max(len),
                None => widths.push(len),
            }
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<(String, usize)>| {
        let mut text = String::from(indent);
        let last = cells.len().saturating_sub(1);
        for (i, (painted, len)) in cells.into_iter().enumerate() {
            text.push_str(&painted);
            if i < last {
                text.push_str(&" ".repeat(widths[i] - len + 3));
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(
        headers
            .iter()
            .map(|h| (h.to_string(), h.chars().count()))
            .collect(),
    );
    for row in rows {
        line(
            row.iter()
                .map(|c| (style.paint(&c.text, c.tone), c.text.chars().count()))
                .collect(),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_colors_only_a_terminal_without_no_color() {
        assert!(ColorMode::Auto.enabled(true, false));
        assert!(!ColorMode::Auto.enabled(false, false));
        assert!(!ColorMode::Auto.enabled(true, true));
        assert!(ColorMode::Always.enabled(false, true));
        assert!(!ColorMode::Never.enabled(true, false));
    }

    #[test]
    fn control_characters_from_others_are_shown_escaped_and_colors_pass() {
        assert_eq!(printable("plain\ttext\n"), "plain\ttext\n");
        let hostile = "boom\r\u{1b}]0;pwned\u{7}\u{1b}[2J\u{9b}31m\u{8}";
        let shown = printable(hostile);
        assert!(!shown.chars().any(|c| c.is_control()), "{shown:?}");
        assert_eq!(
            shown,
            "boom\\u{d}\\u{1b}]0;pwned\\u{7}\\u{1b}[2J\\u{9b}31m\\u{8}"
        );
        let colored = Style { color: true }.paint("True", Tone::Good);
        assert_eq!(printable(&colored), colored);
        let table = render(OutputFormat::Table, Style::PLAIN, &(), |_, _| {
            hostile.to_owned()
        })
        .unwrap();
        assert!(!table.contains('\u{1b}'), "{table:?}");
    }

    #[test]
    fn paint_wraps_only_toned_text_when_colored() {
        let on = Style { color: true };
        assert_eq!(on.paint("True", Tone::Good), "\x1b[32mTrue\x1b[0m");
        assert_eq!(on.paint("False", Tone::Bad), "\x1b[31mFalse\x1b[0m");
        assert_eq!(on.paint("x", Tone::Plain), "x");
        assert_eq!(Style::PLAIN.paint("True", Tone::Good), "True");
    }

    #[test]
    fn table_aligns_columns_ignoring_color_codes() {
        let rows = vec![
            vec![
                Cell::plain("source-controller"),
                Cell::toned("True", Tone::Good),
                Cell::plain("img:1"),
            ],
            vec![
                Cell::plain("kc"),
                Cell::toned("False", Tone::Bad),
                Cell::plain("img:2"),
            ],
        ];
        let plain = table("  ", &["NAME", "READY", "IMAGE"], &rows, Style::PLAIN);
        assert_eq!(
            plain,
            "  NAME                READY   IMAGE\n  \
               source-controller   True    img:1\n  \
               kc                  False   img:2\n"
        );
        let colored = table(
            "  ",
            &["NAME", "READY", "IMAGE"],
            &rows,
            Style { color: true },
        );
        let stripped = colored
            .replace("\x1b[32m", "")
            .replace("\x1b[31m", "")
            .replace("\x1b[0m", "");
        assert_eq!(stripped, plain);
    }

    #[test]
    fn broken_pipe_is_recognised_through_context() {
        let err = anyhow::Error::from(io::Error::from(io::ErrorKind::BrokenPipe))
            .context("writing the status");
        assert!(is_broken_pipe(&err));
        assert!(!is_broken_pipe(&anyhow::anyhow!("agent unreachable")));
        // The same code elsewhere is no closed pipe: 233 is only Windows' meaning.
        let not_connected = anyhow::Error::from(io::Error::from_raw_os_error(233));
        assert_eq!(is_broken_pipe(&not_connected), cfg!(windows));
    }

    #[test]
    fn series_separate_tables_by_header_and_yaml_by_document_marker() {
        let sep = |format, first| series_separator(format, first, "At 12:00:00 UTC");
        assert_eq!(sep(OutputFormat::Table, true), "At 12:00:00 UTC\n");
        assert_eq!(sep(OutputFormat::Table, false), "\nAt 12:00:00 UTC\n");
        assert_eq!(sep(OutputFormat::Yaml, true), "");
        assert_eq!(sep(OutputFormat::Yaml, false), "---\n");
        assert_eq!(sep(OutputFormat::Json, true), "");
        assert_eq!(sep(OutputFormat::Json, false), "");
    }

    #[test]
    fn render_json_and_yaml_use_the_view() {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct View {
            some_field: u8,
        }
        let view = View { some_field: 7 };
        let never = |_: &View, _| unreachable!("table renderer must not run for json/yaml");
        assert_eq!(
            render(OutputFormat::Json, Style::PLAIN, &view, never).unwrap(),
            "{\n  \"someField\": 7\n}\n"
        );
        assert_eq!(
            render(OutputFormat::Yaml, Style::PLAIN, &view, never).unwrap(),
            "someField: 7\n"
        );
        assert_eq!(
            render(OutputFormat::Table, Style::PLAIN, &view, |v, _| format!(
                "{}",
                v.some_field
            ))
            .unwrap(),
            "7"
        );
    }
}
