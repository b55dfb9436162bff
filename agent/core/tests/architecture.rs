//! The rules of docs/architecture.md (`### Rules`, in `## Module map`) checked against the code:
//! which module of agent/src, agent/core/src and plugin/src imports which, and which crates.
//!
//! A scanner of our own rather than a parser, so the test needs no dependency and builds in
//! seconds: it lexes each `.rs` file with comments, strings and char literals left out, reads
//! every `use` tree and every path in code, resolves `crate::`, `super::`, `self::` and
//! child-module paths to the module they name, and maps that module to its unit (a folder, or a
//! top-level file). Test code (`#[cfg(test)]`, `#[test]`, and the files a `#[cfg(test)] mod`
//! declares) is held to the same rules, as the doc says.
//!
//! Each rule has an id; the doc's rule lines carry the same ids, and
//! `the_rules_here_are_the_docs_rules` checks the two lists are equal.
//!
//! Lives in tenantflux-core because that crate compiles in seconds; it reads files only.

mod support;

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt, fs,
    path::{Path, PathBuf},
};

/// The rules, by the id the doc gives each.
const CORE_PURE: &str = "core-pure";
const BINARIES_APART: &str = "binaries-apart";
const AGENT_PROTO_AT_EDGE: &str = "agent-proto-at-edge";
const AGENT_LAYERS: &str = "agent-layers";
const AGENT_NO_CYCLES: &str = "agent-no-cycles";
const PLUGIN_COMMANDS_APART: &str = "plugin-commands-apart";
const PLUGIN_CLI_ON_TOP: &str = "plugin-cli-on-top";

const RULES: &[&str] = &[
    CORE_PURE,
    BINARIES_APART,
    AGENT_PROTO_AT_EDGE,
    AGENT_LAYERS,
    AGENT_NO_CYCLES,
    PLUGIN_COMMANDS_APART,
    PLUGIN_CLI_ON_TOP,
];

/// Crates that do I/O (or speak gRPC), which the core crate may not depend on; a name ending in
/// `-` stands for its whole family (`tokio-util`, `kube-runtime`, …). The doc's `core-pure` line
/// names each of them.
const IO_CRATES: &[&str] = &[
    "kube",
    "kube-",
    "k8s-openapi",
    "tonic",
    "tonic-",
    "prost",
    "prost-",
    "tokio",
    "tokio-",
    "hyper",
    "hyper-",
    "reqwest",
    "axum",
    "tower",
    "tower-",
    "http",
    "http-",
    "oci-client",
    "rustls",
];

const PROTO_CRATE: &str = "tenantflux_proto";
const AGENT_CRATE: &str = "tenantflux_agent";
const PLUGIN_CRATE: &str = "kubectl_tenantflux";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(relative: &str) -> String {
    let path = root().join(relative);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

// ---------------------------------------------------------------------------------------------
// The lexer: identifiers, `::` and single punctuation, with their line; nothing else.

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ident(String),
    /// `::`
    Sep,
    Punct(char),
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    line: usize,
}

/// Skips a string's body from just after its opening quote; returns the index after its close.
fn skip_string(chars: &[char], mut i: usize, line: &mut usize) -> usize {
    while i < chars.len() {
        match chars[i] {
            '\\' => {
                if chars.get(i + 1) == Some(&'\n') {
                    *line += 1;
                }
                i += 2;
            }
            '"' => return i + 1,
            c => {
                if c == '\n' {
                    *line += 1;
                }
                i += 1;
            }
        }
    }
    i
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn lex(source: &str) -> Vec<Token> {
    let chars: Vec<char> = source.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match c {
            '\n' => {
                line += 1;
                i += 1;
            }
            c if c.is_whitespace() => i += 1,
            '/' if next == Some('/') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '/' if next == Some('*') => {
                let mut depth = 0;
                while i < chars.len() {
                    if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                        depth += 1;
                        i += 2;
                    } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        if chars[i] == '\n' {
                            line += 1;
                        }
                        i += 1;
                    }
                }
            }
            '"' => i = skip_string(&chars, i + 1, &mut line),
            '\'' => {
                if next == Some('\\') {
                    // An escaped char literal: `'\''`, `'\n'`, `'\u{…}'`.
                    i += 3;
                    while i < chars.len() && chars[i] != '\'' {
                        i += 1;
                    }
                    i += 1;
                } else if chars.get(i + 2) == Some(&'\'') {
                    i += 3;
                } else {
                    // A lifetime or a label: its name is no path.
                    i += 1;
                    while i < chars.len() && is_ident_char(chars[i]) {
                        i += 1;
                    }
                }
            }
            c if c.is_ascii_digit() => {
                while i < chars.len() && is_ident_char(chars[i]) {
                    i += 1;
                }
            }
            c if c.is_alphabetic() || c == '_' => {
                let start = i;
                while i < chars.len() && is_ident_char(chars[i]) {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let after = chars.get(i).copied();
                if matches!(word.as_str(), "r" | "br" | "cr") && matches!(after, Some('"' | '#')) {
                    let mut j = i;
                    while chars.get(j) == Some(&'#') {
                        j += 1;
                    }
                    let hashes = j - i;
                    if chars.get(j) == Some(&'"') {
                        i = j + 1;
                        while i < chars.len() {
                            if chars[i] == '"'
                                && (1..=hashes).all(|k| chars.get(i + k) == Some(&'#'))
                            {
                                i += 1 + hashes;
                                break;
                            }
                            if chars[i] == '\n' {
                                line += 1;
                            }
                            i += 1;
                        }
                        continue;
                    }
                    if word == "r" && hashes == 1 {
                        // A raw identifier, `r#type`.
                        let start = j;
                        i = j;
                        while i < chars.len() && is_ident_char(chars[i]) {
                            i += 1;
                        }
                        out.push(Token {
                            tok: Tok::Ident(chars[start..i].iter().collect()),
                            line,
                        });
                        continue;
                    }
                }
                if matches!(word.as_str(), "b" | "c") && after == Some('"') {
                    i = skip_string(&chars, i + 1, &mut line);
                    continue;
                }
                if word == "b" && after == Some('\'') {
                    i += if chars.get(i + 1) == Some(&'\\') {
                        3
                    } else {
                        2
                    };
                    while i < chars.len() && chars[i] != '\'' {
                        i += 1;
                    }
                    i += 1;
                    continue;
                }
                out.push(Token {
                    tok: Tok::Ident(word),
                    line,
                });
            }
            ':' if next == Some(':') => {
                out.push(Token {
                    tok: Tok::Sep,
                    line,
                });
                i += 2;
            }
            c => {
                out.push(Token {
                    tok: Tok::Punct(c),
                    line,
                });
                i += 1;
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The scanner: every path a file names, where, and whether it is test code.

/// One path a file names, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Named {
    line: usize,
    /// The inline modules (`mod name { … }`) the path is written in, outermost first.
    scope: Vec<String>,
    path: Vec<String>,
    /// Under `#[cfg(test)]` or `#[test]`.
    test: bool,
    /// A `pub use` (any visibility): a re-export.
    reexport: bool,
}

#[derive(Debug, Default)]
struct Scan {
    named: Vec<Named>,
    /// Child modules declared `#[cfg(test)] mod name;`, as paths from the file's module.
    test_children: Vec<Vec<String>>,
    /// Inline modules, as paths from the file's module.
    inline_modules: Vec<Vec<String>>,
    /// `#![cfg(test)]` at the top of the file.
    test_file: bool,
}

fn ident(tokens: &[Token], i: usize) -> Option<&str> {
    match tokens.get(i).map(|t| &t.tok) {
        Some(Tok::Ident(word)) => Some(word),
        _ => None,
    }
}

fn is(tokens: &[Token], i: usize, tok: &Tok) -> bool {
    tokens.get(i).map(|t| &t.tok) == Some(tok)
}

/// Reads one use tree from `i`, below `prefix`; pushes each leaf path with its line and returns
/// the index after the tree.
fn use_tree(
    tokens: &[Token],
    mut i: usize,
    prefix: &[String],
    out: &mut Vec<(Vec<String>, usize)>,
) -> usize {
    let mut path = prefix.to_vec();
    if is(tokens, i, &Tok::Sep) {
        i += 1;
    }
    loop {
        match tokens.get(i).map(|t| &t.tok) {
            Some(Tok::Ident(word)) => {
                path.push(word.clone());
                let line = tokens[i].line;
                i += 1;
                if is(tokens, i, &Tok::Sep) {
                    i += 1;
                    continue;
                }
                out.push((path, line));
                return if ident(tokens, i) == Some("as") {
                    i + 2
                } else {
                    i
                };
            }
            Some(Tok::Punct('*')) => {
                out.push((path, tokens[i].line));
                return i + 1;
            }
            Some(Tok::Punct('{')) => {
                i += 1;
                loop {
                    match tokens.get(i).map(|t| &t.tok) {
                        None => return i,
                        Some(Tok::Punct('}')) => return i + 1,
                        Some(Tok::Punct(',')) => i += 1,
                        Some(_) => {
                            let after = use_tree(tokens, i, &path, out);
                            i = if after == i { i + 1 } else { after };
                        }
                    }
                }
            }
            _ => return i,
        }
    }
}

/// Whether the attribute whose words are `words` makes its item test code: `cfg(test)`,
/// `cfg(all(test, …))`, `test`, `tokio::test`; not `cfg(not(test))`.
fn test_attribute(words: &[&str]) -> bool {
    match words.first() {
        Some(&"cfg") => words.contains(&"test") && !words.contains(&"not"),
        _ => words.last() == Some(&"test"),
    }
}

/// Whether the `use` at `i` is preceded by a visibility (`pub`, `pub(crate)`, `pub(in …)`).
fn visible(tokens: &[Token], i: usize) -> bool {
    let Some(mut j) = i.checked_sub(1) else {
        return false;
    };
    if is(tokens, j, &Tok::Punct(')')) {
        while j > 0 && !is(tokens, j, &Tok::Punct('(')) {
            j -= 1;
        }
        let Some(before) = j.checked_sub(1) else {
            return false;
        };
        j = before;
    }
    ident(tokens, j) == Some("pub")
}

fn scan(source: &str) -> Scan {
    let tokens = lex(source);
    let mut out = Scan::default();
    let mut depth = 0usize;
    // Inline modules open: name, the depth inside them, whether they are test code.
    let mut modules: Vec<(String, usize, bool)> = Vec::new();
    // The depths inside test items (a `#[test] fn`, a `#[cfg(test)] impl`) open now.
    let mut test_bodies: Vec<usize> = Vec::new();
    let mut pending_test = false;
    let mut i = 0;
    while i < tokens.len() {
        let scope: Vec<String> = modules.iter().map(|m| m.0.clone()).collect();
        let in_test = pending_test
            || !test_bodies.is_empty()
            || modules.last().is_some_and(|m| m.2)
            || out.test_file;
        match &tokens[i].tok {
            Tok::Punct('#') => {
                let inner = is(&tokens, i + 1, &Tok::Punct('!'));
                let open = i + 1 + usize::from(inner);
                if is(&tokens, open, &Tok::Punct('[')) {
                    let mut close = open;
                    let mut brackets = 0;
                    while close < tokens.len() {
                        match tokens[close].tok {
                            Tok::Punct('[') => brackets += 1,
                            Tok::Punct(']') => {
                                brackets -= 1;
                                if brackets == 0 {
                                    break;
                                }
                            }
                            _ => {}
                        }
                        close += 1;
                    }
                    let words: Vec<&str> =
                        (open..close).filter_map(|k| ident(&tokens, k)).collect();
                    if test_attribute(&words) {
                        if !inner {
                            pending_test = true;
                        } else if let Some(module) = modules.last_mut() {
                            module.2 = true;
                        } else {
                            out.test_file = true;
                        }
                    }
                    i = close + 1;
                    continue;
                }
            }
            Tok::Ident(word) if word == "mod" => {
                if let Some(name) = ident(&tokens, i + 1) {
                    let mut path = scope.clone();
                    path.push(name.to_string());
                    if is(&tokens, i + 2, &Tok::Punct('{')) {
                        depth += 1;
                        modules.push((name.to_string(), depth, in_test));
                        out.inline_modules.push(path);
                        pending_test = false;
                        i += 3;
                        continue;
                    }
                    if is(&tokens, i + 2, &Tok::Punct(';')) {
                        if in_test {
                            out.test_children.push(path);
                        }
                        pending_test = false;
                        i += 3;
                        continue;
                    }
                }
            }
            Tok::Ident(word) if word == "use" => {
                let reexport = visible(&tokens, i);
                let mut leaves = Vec::new();
                let mut end = use_tree(&tokens, i + 1, &[], &mut leaves);
                while end < tokens.len() && !is(&tokens, end, &Tok::Punct(';')) {
                    end += 1;
                }
                for (path, line) in leaves {
                    out.named.push(Named {
                        line,
                        scope: scope.clone(),
                        path,
                        test: in_test,
                        reexport,
                    });
                }
                pending_test = false;
                i = end + 1;
                continue;
            }
            Tok::Ident(first)
                if is(&tokens, i + 1, &Tok::Sep) && !(i > 0 && is(&tokens, i - 1, &Tok::Sep)) =>
            {
                let line = tokens[i].line;
                let mut path = vec![first.clone()];
                let mut j = i + 1;
                while is(&tokens, j, &Tok::Sep) {
                    match ident(&tokens, j + 1) {
                        Some(next) => {
                            path.push(next.to_string());
                            j += 2;
                        }
                        None => break,
                    }
                }
                out.named.push(Named {
                    line,
                    scope,
                    path,
                    test: in_test,
                    reexport: false,
                });
                i = j;
                continue;
            }
            Tok::Punct('{') => {
                depth += 1;
                if pending_test {
                    test_bodies.push(depth);
                    pending_test = false;
                }
            }
            Tok::Punct('}') => {
                if modules.last().is_some_and(|m| m.1 == depth) {
                    modules.pop();
                }
                if test_bodies.last() == Some(&depth) {
                    test_bodies.pop();
                }
                depth = depth.saturating_sub(1);
                pending_test = false;
            }
            Tok::Punct(';') => pending_test = false,
            _ => {}
        }
        i += 1;
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The trees: each file's module and unit, and every import resolved.

/// Where a path leads: a module of the same crate (with whatever item names follow it), or
/// another crate.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    Module(Vec<String>),
    Crate(String),
}

struct SourceFile {
    /// From the repository's root.
    path: String,
    module: Vec<String>,
    /// A binary's root (`main.rs`), a crate of its own.
    binary: bool,
    scan: Scan,
    test: bool,
}

/// One import, resolved.
struct Import {
    file: String,
    line: usize,
    from: String,
    to: Target,
    to_unit: Option<String>,
    test: bool,
    reexport: bool,
}

struct Tree {
    /// The library's crate name, as the binaries' roots name it.
    library: &'static str,
    files: Vec<SourceFile>,
    /// Modules that have a folder.
    folders: BTreeSet<Vec<String>>,
    /// Every module: one per file, and the inline ones.
    modules: BTreeSet<Vec<String>>,
}

impl Tree {
    fn load(dir: &'static str, library: &'static str, binaries: &[&str]) -> Tree {
        let base = root().join(dir);
        let mut paths = Vec::new();
        support::rust_files(&base, &mut paths);
        let mut folders = BTreeSet::new();
        let mut files = Vec::new();
        for path in paths {
            let relative = path.strip_prefix(&base).expect("under the tree");
            let mut parts: Vec<String> = relative
                .with_extension("")
                .iter()
                .map(|p| p.to_str().expect("UTF-8 path").to_string())
                .collect();
            for k in 1..parts.len() {
                folders.insert(parts[..k].to_vec());
            }
            let binary = parts.len() == 1 && binaries.contains(&parts[0].as_str());
            if parts.last().is_some_and(|p| p == "mod") || parts == ["lib"] || binary {
                parts.pop();
            }
            let text = fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
            files.push(SourceFile {
                path: format!("{dir}/{}", relative.to_str().expect("UTF-8 path")),
                module: parts,
                binary,
                scan: scan(&text),
                test: false,
            });
        }
        let mut modules = BTreeSet::new();
        let mut test_modules = BTreeSet::new();
        for file in &files {
            modules.insert(file.module.clone());
            for inline in &file.scan.inline_modules {
                modules.insert([file.module.clone(), inline.clone()].concat());
            }
            for child in &file.scan.test_children {
                test_modules.insert([file.module.clone(), child.clone()].concat());
            }
        }
        for file in &mut files {
            file.test = file.scan.test_file
                || (!file.binary
                    && (1..=file.module.len()).any(|k| test_modules.contains(&file.module[..k])));
        }
        Tree {
            library,
            files,
            folders,
            modules,
        }
    }

    /// The unit a module belongs to: its deepest folder (`operator/bundle/`), else its
    /// top-level file (`oci.rs`), else the library's root (`lib.rs`).
    fn unit(&self, module: &[String]) -> String {
        for k in (1..=module.len()).rev() {
            if self.folders.contains(&module[..k]) {
                return format!("{}/", module[..k].join("/"));
            }
        }
        match module.first() {
            Some(first) if self.modules.contains(&vec![first.clone()]) => format!("{first}.rs"),
            _ => "lib.rs".to_string(),
        }
    }

    fn file_unit(&self, file: &SourceFile) -> String {
        if file.binary {
            file.path
                .rsplit('/')
                .next()
                .expect("a file name")
                .to_string()
        } else {
            self.unit(&file.module)
        }
    }

    /// Where `named`, written in `file`, leads.
    fn resolve(&self, file: &SourceFile, named: &Named) -> Option<Target> {
        let here = [file.module.clone(), named.scope.clone()].concat();
        let path: Vec<&str> = named
            .path
            .iter()
            .enumerate()
            .filter(|(k, s)| *k == 0 || s.as_str() != "self")
            .map(|(_, s)| s.as_str())
            .collect();
        let rest = |from: usize| {
            path[from..]
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
        };
        let first = *path.first()?;
        Some(match first {
            "crate" if !file.binary => Target::Module(rest(1)),
            "self" => Target::Module([here, rest(1)].concat()),
            "super" => {
                let up = path.iter().take_while(|s| **s == "super").count();
                let base = here.get(..here.len().checked_sub(up)?)?.to_vec();
                Target::Module([base, rest(up)].concat())
            }
            _ if self
                .modules
                .contains(&[here.clone(), vec![first.to_string()]].concat()) =>
            {
                Target::Module([here, rest(0)].concat())
            }
            _ if file.binary && first == self.library => Target::Module(rest(1)),
            _ => Target::Crate(first.to_string()),
        })
    }

    fn imports(&self) -> Vec<Import> {
        let mut out = Vec::new();
        for file in &self.files {
            let from = self.file_unit(file);
            for named in &file.scan.named {
                let Some(to) = self.resolve(file, named) else {
                    continue;
                };
                let to_unit = match &to {
                    Target::Module(module) => Some(self.unit(module)),
                    Target::Crate(_) => None,
                };
                out.push(Import {
                    file: file.path.clone(),
                    line: named.line,
                    from: from.clone(),
                    to,
                    to_unit,
                    test: named.test || file.test,
                    reexport: named.reexport,
                });
            }
        }
        out
    }
}

// ---------------------------------------------------------------------------------------------
// The rules.

struct Violation {
    file: String,
    line: usize,
    from: String,
    to: String,
    rule: &'static str,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: {} imports {} (rule: {})",
            self.file, self.line, self.from, self.to, self.rule
        )
    }
}

fn violation(import: &Import, to: impl Into<String>, rule: &'static str) -> Violation {
    Violation {
        file: import.file.clone(),
        line: import.line,
        from: import.from.clone(),
        to: to.into(),
        rule,
    }
}

fn assert_none(violations: Vec<Violation>) {
    // One line per import: a grouped `use` naming two items of a unit is one import.
    let lines: Vec<String> = violations
        .iter()
        .map(ToString::to_string)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    assert!(
        lines.is_empty(),
        "imports docs/architecture.md's rules forbid (### Rules):\n{}",
        lines.join("\n")
    );
}

/// The `### Rules` subsection of docs/architecture.md, up to the next heading.
fn rules_section() -> String {
    let text = read("docs/architecture.md");
    let start = text
        .find("\n### Rules")
        .expect("docs/architecture.md has a `### Rules` subsection");
    let body = &text[start + 1..];
    let end = body[3..].find("\n#").map_or(body.len(), |i| i + 3);
    body[..end].to_string()
}

/// The doc's rule lines, by id: each is `- **id**: text`.
fn doc_rules() -> BTreeMap<String, String> {
    rules_section()
        .lines()
        .filter_map(|line| line.strip_prefix("- **"))
        .filter_map(|rest| rest.split_once("**"))
        .map(|(id, text)| (id.to_string(), text.to_string()))
        .collect()
}

/// The dependency names of a Cargo.toml's `[dependencies]` table, `-` and `_` alike as `-`.
fn dependencies(manifest: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in read(manifest).lines() {
        let line = line.trim();
        if line.starts_with('[') {
            inside = line == "[dependencies]";
        } else if inside
            && !line.starts_with('#')
            && let Some((name, _)) = line.split_once('=')
        {
            out.push(name.trim().replace('_', "-"));
        }
    }
    out
}

fn io_crate(name: &str) -> bool {
    let name = name.replace('_', "-");
    IO_CRATES.iter().any(|c| match c.strip_suffix('-') {
        Some(family) => name.starts_with(&format!("{family}-")),
        None => name == *c,
    })
}

#[test]
fn the_rules_here_are_the_docs_rules() {
    let doc: BTreeSet<String> = doc_rules().into_keys().collect();
    let here: BTreeSet<String> = RULES.iter().map(|r| r.to_string()).collect();
    assert_eq!(
        doc, here,
        "docs/architecture.md's rules (`- **id**: …` lines) and this test's differ"
    );
    let core = &doc_rules()[CORE_PURE];
    for name in IO_CRATES {
        assert!(
            core.contains(&format!("`{name}")),
            "the doc's {CORE_PURE} line does not name `{name}`"
        );
    }
}

#[test]
fn core_pure() {
    let mut violations = Vec::new();
    for name in dependencies("agent/core/Cargo.toml") {
        if io_crate(&name)
            || ["tenantflux-proto", "tenantflux-agent", "kubectl-tenantflux"]
                .contains(&name.as_str())
        {
            violations.push(Violation {
                file: "agent/core/Cargo.toml".into(),
                line: 0,
                from: "tenantflux-core".into(),
                to: name,
                rule: CORE_PURE,
            });
        }
    }
    let tree = Tree::load("agent/core/src", "tenantflux_core", &[]);
    for import in tree.imports() {
        if let Target::Crate(name) = &import.to
            && (io_crate(name) || [PROTO_CRATE, AGENT_CRATE, PLUGIN_CRATE].contains(&name.as_str()))
        {
            violations.push(violation(&import, name, CORE_PURE));
        }
    }
    assert_none(violations);
}

#[test]
fn binaries_apart() {
    let mut violations = Vec::new();
    for (manifest, other) in [
        ("agent/Cargo.toml", "kubectl-tenantflux"),
        ("plugin/Cargo.toml", "tenantflux-agent"),
    ] {
        if dependencies(manifest).iter().any(|d| d == other) {
            violations.push(Violation {
                file: manifest.into(),
                line: 0,
                from: manifest.into(),
                to: other.into(),
                rule: BINARIES_APART,
            });
        }
    }
    let agent = Tree::load("agent/src", AGENT_CRATE, &["main"]);
    let plugin = Tree::load("plugin/src", PLUGIN_CRATE, &["main", "complete_main"]);
    for (tree, other) in [(&agent, PLUGIN_CRATE), (&plugin, AGENT_CRATE)] {
        for import in tree.imports() {
            if import.to == Target::Crate(other.to_string()) {
                violations.push(violation(&import, other, BINARIES_APART));
            }
        }
    }
    assert_none(violations);
}

#[test]
fn agent_proto_at_edge() {
    let tree = Tree::load("agent/src", AGENT_CRATE, &["main"]);
    let violations = tree
        .imports()
        .into_iter()
        .filter(|i| i.to == Target::Crate(PROTO_CRATE.to_string()))
        .filter(|i| !i.from.starts_with("server/"))
        .map(|i| violation(&i, PROTO_CRATE, AGENT_PROTO_AT_EDGE))
        .collect();
    assert_none(violations);
}

/// The top-level unit a unit belongs to: `operator/bundle/` → `operator/`.
fn top(unit: &str) -> String {
    match unit.split_once('/') {
        Some((first, _)) => format!("{first}/"),
        None => unit.to_string(),
    }
}

/// The agent's top-level units in the order the module map lists them (`agent/src/X` rows of its
/// tables, sub-folders left out: they share their folder's place).
fn agent_layers() -> Vec<String> {
    let text = read("docs/architecture.md");
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("| `agent/src/") else {
            continue;
        };
        let Some((unit, _)) = rest.split_once('`') else {
            continue;
        };
        let unit = top(unit);
        if !out.contains(&unit) {
            out.push(unit);
        }
    }
    out
}

/// Imports between two units of agent/src, without `lib.rs`'s re-exports (the crate's wiring).
fn agent_edges(tree: &Tree) -> Vec<Import> {
    tree.imports()
        .into_iter()
        .filter(|i| !(i.from == "lib.rs" && i.reexport))
        .filter(|i| i.to_unit.as_ref().is_some_and(|to| *to != i.from))
        .collect()
}

#[test]
fn agent_layers_point_one_way() {
    let tree = Tree::load("agent/src", AGENT_CRATE, &["main"]);
    let layers = agent_layers();
    assert!(
        layers.len() > 5 && layers[0] == "lib.rs",
        "docs/architecture.md's agent/src table should start at lib.rs: {layers:?}"
    );
    let rank = |unit: &str| layers.iter().position(|l| *l == top(unit));
    let mut violations = Vec::new();
    for import in agent_edges(&tree) {
        let to = import.to_unit.clone().expect("a unit");
        if let (Some(from), Some(target)) = (rank(&import.from), rank(&to))
            && target > from
        {
            violations.push(violation(&import, to, AGENT_LAYERS));
        }
    }
    assert_none(violations);
}

#[test]
fn agent_no_cycles() {
    let tree = Tree::load("agent/src", AGENT_CRATE, &["main"]);
    let edges = agent_edges(&tree);
    let mut next: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for import in &edges {
        next.entry(import.from.clone())
            .or_default()
            .insert(import.to_unit.clone().expect("a unit"));
    }
    let reaches = |from: &str, to: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_string()];
        while let Some(unit) = todo.pop() {
            for n in next.get(&unit).into_iter().flatten() {
                if n == to {
                    return true;
                }
                if seen.insert(n.clone()) {
                    todo.push(n.clone());
                }
            }
        }
        false
    };
    let violations = edges
        .iter()
        .filter(|i| reaches(i.to_unit.as_deref().expect("a unit"), &i.from))
        .map(|i| violation(i, i.to_unit.clone().expect("a unit"), AGENT_NO_CYCLES))
        .collect();
    assert_none(violations);
}

/// The command group a plugin unit belongs to: `commands/fleet/dashboard/` → `fleet`.
fn group(unit: &str) -> Option<&str> {
    unit.strip_prefix("commands/")?
        .split('/')
        .next()
        .filter(|g| !g.is_empty())
}

#[test]
fn plugin_commands_apart() {
    let tree = Tree::load("plugin/src", PLUGIN_CRATE, &["main", "complete_main"]);
    let violations = tree
        .imports()
        .into_iter()
        .filter_map(|i| {
            let to = i.to_unit.clone()?;
            let (from_group, to_group) = (group(&i.from)?, group(&to)?);
            (from_group != to_group).then(|| violation(&i, to, PLUGIN_COMMANDS_APART))
        })
        .collect();
    assert_none(violations);
}

#[test]
fn plugin_cli_on_top() {
    let tree = Tree::load("plugin/src", PLUGIN_CRATE, &["main", "complete_main"]);
    let mains = ["main.rs", "complete_main.rs"];
    let violations = tree
        .imports()
        .into_iter()
        .filter_map(|i| {
            let to = i.to_unit.clone()?;
            let to_command = to.starts_with("commands/");
            let from_command = i.from.starts_with("commands/");
            let forbidden = (to_command && !from_command && i.from != "cli.rs")
                || (to == "cli.rs"
                    && i.from != "cli.rs"
                    && !mains.contains(&i.from.as_str())
                    && !i.test);
            forbidden.then(|| violation(&i, to, PLUGIN_CLI_ON_TOP))
        })
        .collect();
    assert_none(violations);
}

// ---------------------------------------------------------------------------------------------
// The scanner's own tests: the forms a line-by-line grep gets wrong.

fn paths(source: &str) -> Vec<String> {
    scan(source)
        .named
        .iter()
        .map(|n| {
            let mut text = n.path.join("::");
            if !n.scope.is_empty() {
                text = format!("{}> {text}", n.scope.join("::"));
            }
            if n.test {
                text.push_str(" [test]");
            }
            if n.reexport {
                text.push_str(" [pub]");
            }
            format!("{}: {text}", n.line)
        })
        .collect()
}

#[test]
fn the_scanner_reads_grouped_and_multi_line_use_lists() {
    let source = "use crate::{a::b, c};\nuse super::{\n    x::{self, Y},\n    z as w,\n    q::*,\n};\nuse ::std::fmt;\n";
    assert_eq!(
        paths(source),
        [
            "1: crate::a::b",
            "1: crate::c",
            "3: super::x::self",
            "3: super::x::Y",
            "4: super::z",
            "5: super::q",
            "7: std::fmt",
        ]
    );
}

#[test]
fn the_scanner_reads_paths_in_code_and_visibility() {
    let source = "pub(crate) use crate::a::B;\npub use c::D;\nfn f() -> crate::e::F {\n    let x = super::g::h(Vec::<u8>::new());\n    <T as crate::i::J>::k();\n}\n";
    assert_eq!(
        paths(source),
        [
            "1: crate::a::B [pub]",
            "2: c::D [pub]",
            "3: crate::e::F",
            "4: super::g::h",
            "4: Vec",
            "5: crate::i::J",
        ]
    );
}

#[test]
fn the_scanner_skips_comments_strings_and_chars() {
    let source = "// use crate::a;\n/* crate::b /* nested */ crate::c */\nlet s = \"crate::d\";\nlet r = r#\"crate::e \"quoted\"\"#;\nlet q = '\"'; let l: &'static str = \"\\\"\";\nlet b = b'\\''; fn g<'a>(x: &'a u8) {}\n/// [`crate::f`]\ncrate::g::h();\n";
    assert_eq!(paths(source), ["8: crate::g::h"]);
}

#[test]
fn the_scanner_marks_test_code_and_inline_modules() {
    let source = "use crate::a;\n#[cfg(test)]\nmod tests {\n    use super::*;\n    #[test]\n    fn t() { crate::b::c(); }\n}\n#[cfg(test)]\nmod fixtures;\n#[cfg(not(test))]\nfn real() { crate::d::e(); }\nmod inner { use super::f; }\n#[test]\nfn u() { crate::g::h(); }\nfn v() { crate::i::j(); }\n";
    let scanned = scan(source);
    assert_eq!(scanned.test_children, [vec!["fixtures".to_string()]]);
    assert_eq!(
        scanned.inline_modules,
        [vec!["tests".to_string()], vec!["inner".to_string()]]
    );
    assert_eq!(
        paths(source),
        [
            "1: crate::a",
            "4: tests> super [test]",
            "6: tests> crate::b::c [test]",
            "11: crate::d::e",
            "12: inner> super::f",
            "14: crate::g::h [test]",
            "15: crate::i::j",
        ]
    );
}

#[test]
fn the_scanner_counts_lines_across_multi_line_strings() {
    let source = "let s = \"a\nb\\\nc\";\nlet r = r\"x\ny\";\ncrate::z::w();\n";
    assert_eq!(paths(source), ["6: crate::z::w"]);
}

#[test]
fn modules_resolve_to_their_units() {
    let tree = Tree::load("agent/src", AGENT_CRATE, &["main"]);
    let unit = |path: &str| tree.unit(&path.split("::").map(String::from).collect::<Vec<_>>());
    assert_eq!(unit("operator::bundle::Bundle"), "operator/bundle/");
    assert_eq!(unit("operator::InstallState"), "operator/");
    assert_eq!(unit("oci::Registry"), "oci.rs");
    assert_eq!(unit("VERSION"), "lib.rs");
    assert_eq!(unit("policy::store::Held"), "policy/store/");
    let file = |p: &str| {
        tree.files
            .iter()
            .find(|f| f.path == format!("agent/src/{p}"))
            .unwrap_or_else(|| panic!("agent/src/{p}"))
    };
    assert_eq!(tree.file_unit(file("policy/store.rs")), "policy/store/");
    assert_eq!(tree.file_unit(file("main.rs")), "main.rs");
    assert!(file("status/derive/tests.rs").test);
    let named = |path: &str, scope: &[&str]| Named {
        line: 1,
        scope: scope.iter().map(|s| s.to_string()).collect(),
        path: path.split("::").map(String::from).collect(),
        test: false,
        reexport: false,
    };
    let module = |path: &str| Some(Target::Module(path.split("::").map(String::from).collect()));
    let source = file("policy/store/restore.rs");
    assert_eq!(
        tree.resolve(source, &named("super::PolicyStore", &[])),
        module("policy::store::PolicyStore")
    );
    assert_eq!(
        tree.resolve(source, &named("super::super::x", &["tests"])),
        module("policy::store::x")
    );
    assert_eq!(
        tree.resolve(file("lib.rs"), &named("cli::Args", &[])),
        module("cli::Args")
    );
    assert_eq!(
        tree.resolve(file("main.rs"), &named("tenantflux_agent::Args", &[])),
        module("Args")
    );
    assert_eq!(
        tree.resolve(source, &named("kube::Api", &[])),
        Some(Target::Crate("kube".into()))
    );
}
