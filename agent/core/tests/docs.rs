//! The documentation against the tree, so it cannot go stale unnoticed: every repository path
//! the docs name in backticks exists, the module map in docs/architecture.md lists every folder
//! of the three source trees, and the README stays a user's page (short, narrow lines, no
//! history) that keeps the two commands CI and users run.
//!
//! Lives in tenantflux-core because that crate compiles in seconds; it reads files only.

use std::{
    fs,
    path::{Path, PathBuf},
};

/// Where a backticked word is taken for a path into this repository.
const PATH_ROOTS: &[&str] = &[
    "agent/", "plugin/", "proto/", "tests/", "deploy/", "docs/", ".ci/",
];

/// The source trees the module map must cover: every folder in them, and for those marked
/// `true` every top-level `.rs` file too (files inside folders are split freely and not listed).
const MAPPED_TREES: &[(&str, bool)] = &[
    ("agent/src", true),
    ("agent/core/src", false),
    ("plugin/src", true),
];

/// The README is the entry point: what tenantflux is, how to install it, the two commands and
/// where each reader goes next. Everything else lives in docs/.
const README_MAX_LINES: usize = 250;
const README_MAX_LINE_CHARS: usize = 200;

/// Words that look like a commit hash and are not one.
const NOT_HASHES: &[&str] = &["ed25519"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(relative: &str) -> String {
    let path = root().join(relative);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// README.md, SECURITY.md and every `.md` under docs/ (docs/reference/ included), as
/// (path, text).
fn documents() -> Vec<(String, String)> {
    fn walk(relative: &str, out: &mut Vec<String>) {
        let dir = root().join(relative);
        for entry in fs::read_dir(&dir).unwrap_or_else(|e| panic!("reading {relative}/: {e}")) {
            let entry = entry.expect("docs/ entry");
            let name = entry.file_name().into_string().expect("UTF-8 name");
            let path = format!("{relative}/{name}");
            if entry.file_type().expect("file type").is_dir() {
                walk(&path, out);
            } else if name.ends_with(".md") {
                out.push(path);
            }
        }
    }
    let mut names = vec!["README.md".to_string(), "SECURITY.md".to_string()];
    let mut in_docs = Vec::new();
    walk("docs", &mut in_docs);
    in_docs.sort();
    names.extend(in_docs);
    names
        .into_iter()
        .map(|n| {
            let text = read(&n);
            (n, text)
        })
        .collect()
}

/// The text outside fenced code blocks (```), where a backtick is markdown, not shell.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The contents of every inline code span.
fn code_spans(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// The repository path a code span names, if it names one: its first word, when that starts
/// with one of [`PATH_ROOTS`] and holds no placeholder or glob (`<group>`, `*`, `…`).
fn repository_path(span: &str) -> Option<&str> {
    let word = span.split_whitespace().next()?;
    let word = word.trim_end_matches([',', '.', ';', ':', ')']);
    let placeholder = word.contains(['<', '>', '*', '…', '$', '{', '|']);
    (PATH_ROOTS.iter().any(|r| word.starts_with(r)) && word.contains('/') && !placeholder)
        .then_some(word)
}

#[test]
fn every_path_the_docs_name_exists() {
    let mut missing = Vec::new();
    for (doc, text) in documents() {
        for span in code_spans(&prose(&text)) {
            if let Some(path) = repository_path(span)
                && !root().join(path).exists()
            {
                missing.push(format!("{doc}: `{path}`"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "paths named in the docs that do not exist:\n{}",
        missing.join("\n")
    );
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let mut broken = Vec::new();
    for (doc, text) in documents() {
        let dir = Path::new(&doc).parent().unwrap_or(Path::new(""));
        for (i, _) in text.match_indices("](") {
            let rest = &text[i + 2..];
            let Some(end) = rest.find(')') else { continue };
            let target = &rest[..end];
            if target.contains("://") || target.starts_with('#') || target.starts_with("mailto:") {
                continue;
            }
            let file = target.split('#').next().unwrap_or(target);
            if !root().join(dir).join(file).exists() {
                broken.push(format!("{doc}: ({target})"));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "links that lead nowhere:\n{}",
        broken.join("\n")
    );
}

/// Folders (as `path/`) and mapped top-level files under `tree`, relative to the repository.
fn modules(tree: &str, top_level_files: bool) -> Vec<String> {
    fn walk(dir: &Path, relative: &str, top: bool, files: bool, out: &mut Vec<String>) {
        let mut entries: Vec<_> = fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
            .map(|e| e.expect("directory entry"))
            .collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let name = entry.file_name().into_string().expect("UTF-8 name");
            let path = format!("{relative}/{name}");
            if entry.file_type().expect("file type").is_dir() {
                out.push(format!("{path}/"));
                walk(&entry.path(), &path, false, files, out);
            } else if top && files && name.ends_with(".rs") {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&root().join(tree), tree, true, top_level_files, &mut out);
    out
}

/// The `## Module map` section of docs/architecture.md, up to the next `## ` heading.
fn module_map() -> String {
    let text = read("docs/architecture.md");
    let start = text
        .find("\n## Module map")
        .expect("docs/architecture.md has a `## Module map` section");
    let body = &text[start + 1..];
    let end = body[3..].find("\n## ").map_or(body.len(), |i| i + 3);
    body[..end].to_string()
}

#[test]
fn the_module_map_lists_every_folder_and_top_level_file() {
    let map = module_map();
    let listed: Vec<&str> = code_spans(&map).into_iter().collect();
    let mut unlisted = Vec::new();
    for (tree, files) in MAPPED_TREES {
        for module in modules(tree, *files) {
            if !listed.contains(&module.as_str()) {
                unlisted.push(module);
            }
        }
    }
    assert!(
        unlisted.is_empty(),
        "docs/architecture.md's module map does not list (in backticks, folders with a trailing /):\n{}",
        unlisted.join("\n")
    );
}

/// Words of 7 to 40 hex digits with at least one digit and one letter: what a commit hash looks
/// like, and what no English word or plain number does.
fn commit_hashes(text: &str) -> Vec<&str> {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| (7..=40).contains(&w.len()))
        .filter(|w| {
            w.chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        })
        .filter(|w| {
            w.chars().any(|c| c.is_ascii_digit()) && w.chars().any(|c| c.is_ascii_alphabetic())
        })
        .filter(|w| !NOT_HASHES.contains(w))
        .collect()
}

/// Every `20DD-DD-DD` in `text`.
fn dates(text: &str) -> Vec<&str> {
    let bytes = text.as_bytes();
    let shape = |w: &[u8]| {
        w[0] == b'2'
            && w[1] == b'0'
            && w.iter().enumerate().all(|(i, b)| {
                if i == 4 || i == 7 {
                    *b == b'-'
                } else {
                    b.is_ascii_digit()
                }
            })
    };
    (0..bytes.len().saturating_sub(9))
        .filter(|&i| shape(&bytes[i..i + 10]))
        .map(|i| &text[i..i + 10])
        .collect()
}

/// History that belongs in CHANGELOG.md: issue numbers (`issue 18`, `#20`) and machine-load
/// figures (`load ≈ 6`, `load 5–14`).
fn history(text: &str) -> Vec<String> {
    // ASCII lowercasing keeps byte offsets, so an index into `lower` is one into `text`.
    let lower = text.to_ascii_lowercase();
    let mut found = Vec::new();
    for marker in ["issue ", "#", "load "] {
        for (i, _) in lower.match_indices(marker) {
            // `PKCS#8`, `download 2`: inside a word, not a mark of history.
            if text[..i].ends_with(|c: char| c.is_alphanumeric()) {
                continue;
            }
            let after = &text[i + marker.len()..];
            let figure = match marker {
                "load " => after.trim_start_matches(['≈', '~', ' ']),
                _ => after,
            };
            if figure.starts_with(|c: char| c.is_ascii_digit()) {
                let digits = figure.chars().take_while(char::is_ascii_digit).count();
                let end = i + marker.len() + (after.len() - figure.len()) + digits;
                found.push(text[i..end].to_string());
            }
        }
    }
    found
}

#[test]
fn the_readme_is_a_short_page_for_users() {
    let readme = read("README.md");
    let lines = readme.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines, at most {README_MAX_LINES}: move detail to docs/"
    );
    let wide: Vec<String> = readme
        .lines()
        .enumerate()
        .filter(|(_, line)| line.chars().count() > README_MAX_LINE_CHARS)
        .map(|(i, line)| format!("line {}: {} characters", i + 1, line.chars().count()))
        .collect();
    assert!(
        wide.is_empty(),
        "README.md lines over {README_MAX_LINE_CHARS} characters (wrap them, or move the table to docs/):\n{}",
        wide.join("\n")
    );
}

/// The command CI runs last (`.ci/run`: "exactly the README's test command"), and the demo,
/// each on a code line of its own in the README.
#[test]
fn the_readme_keeps_the_test_command_ci_runs_and_the_demo() {
    let ci = read(".ci/run");
    let test_command = ci
        .lines()
        .map(str::trim)
        .rfind(|line| !line.is_empty() && !line.starts_with('#'))
        .expect("a command in .ci/run");
    let readme = read("README.md");
    for command in [test_command, "tests/env/demo"] {
        assert!(
            readme.lines().any(|line| line == format!("    {command}")),
            "README.md has no code line `{command}` (the test command `.ci/run` runs, and the demo)"
        );
    }
}

#[test]
fn the_pages_for_users_carry_no_history() {
    // docs/policy.md and docs/upgrades.md show example output with deadline dates; the rest has
    // no reason to name a date.
    let dated = [
        "README.md",
        "SECURITY.md",
        "docs/reliability.md",
        "docs/benchmarks.md",
    ];
    let mut found = Vec::new();
    for (doc, text) in documents() {
        for hash in commit_hashes(&text) {
            found.push(format!("{doc}: commit hash {hash:?}"));
        }
        for mark in history(&text) {
            found.push(format!("{doc}: {mark:?}"));
        }
        if dated.contains(&doc.as_str()) {
            for date in dates(&text) {
                found.push(format!("{doc}: date {date}"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "history belongs in CHANGELOG.md:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_checks_find_what_they_look_for() {
    assert_eq!(
        commit_hashes("on commit 4f9ce94, deadbeef and 1234567 and decade"),
        ["4f9ce94"]
    );
    assert_eq!(dates("measured 2026-12-01 and 20261201"), ["2026-12-01"]);
    assert_eq!(
        history("issue 18 measured, before #20, load ≈ 6, download 2, # 1, PKCS#8"),
        ["issue 18", "#20", "load ≈ 6"]
    );
    assert_eq!(
        repository_path("tests/env/cluster up NAME"),
        Some("tests/env/cluster")
    );
    assert_eq!(repository_path("plugin/src/commands/<group>/"), None);
    assert_eq!(repository_path("tenantflux_tests::flux::GitRepo"), None);
    assert_eq!(code_spans("a `b` c `d e` f"), ["b", "d e"]);
}
