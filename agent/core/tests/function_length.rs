//! Functions a reader can hold: no production function in the three source trees runs over
//! [`MAX_LINES`] lines unless a comment above it, starting with [`MARKER`], says why (the rule
//! is in docs/architecture.md, under "Module map"). Test code is left out: files named
//! `tests.rs`, files that are `#![cfg(test)]`, and items under `#[cfg(test)]`.
//!
//! Lives in tenantflux-core because that crate compiles in seconds; it reads files only. The
//! scan is lexical (comments, strings and char literals are blanked before braces are
//! counted), which is enough for rustfmt-formatted code.

mod support;

use std::{
    fs,
    path::{Path, PathBuf},
};

/// The trees whose production code the rule covers.
const TREES: &[&str] = &["agent/src", "agent/core/src", "plugin/src"];

/// The most lines a function may span, from its `fn` line to its closing brace.
const MAX_LINES: usize = 100;

/// A comment starting with this, among the comments and attributes right above a longer
/// function, says why it stays long: `// long-fn: one match over every RPC …`.
const MARKER: &str = "// long-fn:";

/// A function longer than [`MAX_LINES`].
#[derive(Debug, PartialEq)]
struct Long {
    name: String,
    /// 1-based line of `fn`.
    line: usize,
    lines: usize,
    /// The reason given after [`MARKER`], if any.
    reason: Option<String>,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `text` with the insides of comments, strings and char literals replaced by spaces, so that
/// braces and `fn` are counted only in code. Lines stay where they were.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if (c == 'r' || (c == 'b' && next == Some('r')))
            && (i == 0 || !ident(chars[i - 1]))
            && chars
                .get(i + if c == 'b' { 2 } else { 1 }..)
                .and_then(raw_string_hashes)
                .is_some()
        {
            let start = i + if c == 'b' { 2 } else { 1 };
            let hashes = raw_string_hashes(&chars[start..]).unwrap_or_default();
            let prefix = start - i + hashes + 1;
            out.extend(std::iter::repeat_n(' ', prefix));
            i += prefix;
            while i < chars.len() {
                if chars[i] == '"' && chars[i + 1..].iter().take(hashes).all(|&h| h == '#') {
                    out.extend(std::iter::repeat_n(' ', hashes + 1));
                    i += hashes + 1;
                    break;
                }
                out.push(blank(chars[i]));
                i += 1;
            }
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                let skip = if chars[i] == '\\' { 2 } else { 1 };
                out.extend(
                    chars[i..(i + skip).min(chars.len())]
                        .iter()
                        .map(|&c| blank(c)),
                );
                i += skip;
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' && char_literal_len(&chars[i..]).is_some() {
            let len = char_literal_len(&chars[i..]).unwrap_or(1);
            out.extend(std::iter::repeat_n(' ', len));
            i += len;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// After `r` (or `br`): how many `#` open a raw string here, if one does.
fn raw_string_hashes(rest: &[char]) -> Option<usize> {
    let hashes = rest.iter().take_while(|&&c| c == '#').count();
    (rest.get(hashes) == Some(&'"')).then_some(hashes)
}

/// The length of the char literal `chars` starts with (`'x'`, `'\n'`, `'\u{1F600}'`), or
/// `None` for a lifetime (`'a`).
fn char_literal_len(chars: &[char]) -> Option<usize> {
    if chars.get(1) == Some(&'\\') {
        let close = chars.iter().skip(3).position(|&c| c == '\'')?;
        return Some(close + 4);
    }
    (chars.get(2) == Some(&'\'')).then_some(3)
}

/// The index of the `}` closing the `{` at `open` in `code`.
fn closing(code: &[u8], open: usize) -> usize {
    let mut depth = 0usize;
    for (i, &b) in code.iter().enumerate().skip(open) {
        match b {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// Where the item starting at `from` opens its body (`{`), or `None` when it ends first (`;`).
fn body_start(code: &[u8], from: usize) -> Option<usize> {
    code[from..]
        .iter()
        .position(|&b| b == b'{' || b == b';')
        .map(|p| from + p)
        .filter(|&p| code[p] == b'{')
}

/// The reason given above the item on line `fn_line` (0-based): the comment and attribute lines
/// right above it are searched for [`MARKER`].
fn reason_above(lines: &[&str], fn_line: usize) -> Option<String> {
    lines[..fn_line]
        .iter()
        .rev()
        .map(|l| l.trim())
        .take_while(|l| l.starts_with("//") || l.starts_with("#["))
        .find_map(|l| l.strip_prefix(MARKER))
        .map(|reason| reason.trim().to_owned())
        .filter(|reason| !reason.is_empty())
}

/// The functions of `text` longer than [`MAX_LINES`], test code left out.
fn long_functions(text: &str) -> Vec<Long> {
    if text.contains("#![cfg(test)]") {
        return Vec::new();
    }
    let masked = code_only(text);
    let code = masked.as_bytes();
    let lines: Vec<&str> = text.lines().collect();
    let line_of = |at: usize| code[..at].iter().filter(|&&b| b == b'\n').count();
    let word_at = |at: usize, word: &[u8]| {
        code[at..].starts_with(word)
            && (at == 0 || !(code[at - 1].is_ascii_alphanumeric() || code[at - 1] == b'_'))
            && code
                .get(at + word.len())
                .is_some_and(|b| !(b.is_ascii_alphanumeric() || *b == b'_'))
    };
    let mut found = Vec::new();
    let mut i = 0;
    while i < code.len() {
        if code[i..].starts_with(b"#[cfg(test)]") {
            // The whole item under the attribute is test code.
            match body_start(code, i) {
                Some(open) => i = closing(code, open) + 1,
                None => i += 1,
            }
            continue;
        }
        if word_at(i, b"fn") {
            let name: String = masked[i + 2..]
                .trim_start()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            // `fn(u32) -> u32` is a pointer type, not a function.
            if !name.is_empty()
                && let Some(open) = body_start(code, i)
            {
                let (first, last) = (line_of(i), line_of(closing(code, open)));
                if last - first + 1 > MAX_LINES {
                    found.push(Long {
                        name,
                        line: first + 1,
                        lines: last - first + 1,
                        reason: reason_above(&lines, first),
                    });
                }
            }
        }
        i += 1;
    }
    found
}

#[test]
fn no_production_function_runs_long_without_a_reason() {
    let mut files = Vec::new();
    for tree in TREES {
        support::rust_files(&root().join(tree), &mut files);
        // tests.rs files are test code, not production.
        files.retain(|f| f.file_name().is_some_and(|n| n != "tests.rs"));
    }
    let mut unexplained = Vec::new();
    let mut explained = Vec::new();
    for file in files {
        let text =
            fs::read_to_string(&file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        let relative = file
            .strip_prefix(root().join(""))
            .unwrap_or(&file)
            .display()
            .to_string();
        for long in long_functions(&text) {
            let place = format!(
                "{relative}:{} {} ({} lines)",
                long.line, long.name, long.lines
            );
            if let Some(reason) = long.reason {
                explained.push(format!("{place}: {reason}"));
            } else {
                unexplained.push(place);
            }
        }
    }
    // Shown with --nocapture: the long functions that say why.
    println!("{}", explained.join("\n"));
    assert!(
        unexplained.is_empty(),
        "functions over {MAX_LINES} lines: split them into named steps, or say why not in a \
         `{MARKER} …` comment right above (see docs/architecture.md):\n{}",
        unexplained.join("\n")
    );
}

// The scanner itself.

/// A function named `name` of `body` lines between its `fn` line and its closing brace.
fn function(name: &str, body: usize) -> String {
    let mut text = format!("fn {name}() {{\n");
    for n in 0..body {
        text.push_str(&format!("    let _x{n} = 1;\n"));
    }
    text.push_str("}\n");
    text
}

#[test]
fn a_function_over_the_limit_is_found_and_one_at_it_is_not() {
    let text = function("short", MAX_LINES - 2) + &function("long", MAX_LINES - 1);
    let long = long_functions(&text);
    assert_eq!(
        long,
        [Long {
            name: "long".into(),
            line: MAX_LINES + 1,
            lines: MAX_LINES + 1,
            reason: None,
        }]
    );
}

#[test]
fn the_reason_is_read_from_the_comments_and_attributes_above() {
    let text = format!(
        "// long-fn: one table\n/// Docs.\n#[allow(clippy::too_many_lines)]\n{}",
        function("long", MAX_LINES)
    );
    assert_eq!(
        long_functions(&text)[0].reason.as_deref(),
        Some("one table")
    );
    // Separated by code or a blank line, or empty: no reason.
    for above in [
        "// long-fn: far\nconst A: u8 = 1;\n",
        "// long-fn: far\n\n",
        "// long-fn:\n",
    ] {
        let text = format!("{above}{}", function("long", MAX_LINES));
        assert_eq!(long_functions(&text)[0].reason, None, "{above:?}");
    }
}

#[test]
fn braces_in_strings_comments_and_chars_do_not_count() {
    let tricky = "fn tricky() {\n    let _a = \"}\";\n    let _b = r#\"}\"}\"#;\n    // }\n    /* } /* } */ */\n    let _c = '}';\n    let _e = ['\\'', '{'];\n    let _d: &'static str = \"\\\"}\";\n";
    let mut text = tricky.to_owned();
    for _ in 0..MAX_LINES {
        text.push_str("    let _x = 1;\n");
    }
    text.push_str("}\n");
    let long = long_functions(&text);
    assert_eq!(long.len(), 1, "{long:?}");
    assert_eq!(long[0].lines, MAX_LINES + 9);
}

#[test]
fn test_code_and_declarations_are_left_out() {
    let long = function("long", MAX_LINES);
    let in_tests = format!("#[cfg(test)]\nmod tests {{\n{long}}}\n");
    assert!(long_functions(&in_tests).is_empty());
    assert!(long_functions(&format!("#![cfg(test)]\n{long}")).is_empty());
    let declared = "trait T {\n    fn declared(&self);\n}\ntype F = fn(u32) -> u32;\n";
    assert!(long_functions(declared).is_empty());
    // A test module declared in a file of its own does not hide what follows.
    let after = format!("#[cfg(test)]\nmod tests;\n{long}");
    assert_eq!(long_functions(&after).len(), 1);
}
