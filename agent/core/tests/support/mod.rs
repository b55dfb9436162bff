//! What the file-reading tests share: walking a source tree, and comparing a generated page
//! with the file it refreshes. Included by the core crate's tests (`mod support;`) and by the
//! agent's flags-page test (`#[path]`), so both generated pages behave alike.
#![allow(dead_code)] // each test binary uses part of it

use std::{
    fs,
    path::{Path, PathBuf},
};

/// Every `.rs` file under `dir`, sorted, depth first.
pub fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Where `found` first differs from `expected`, as a hint for the failure message.
pub fn first_difference(expected: &str, found: &str) -> String {
    let (mut expected_lines, mut found_lines) = (expected.lines(), found.lines());
    for number in 1.. {
        match (expected_lines.next(), found_lines.next()) {
            (None, None) => break,
            (e, f) if e == f => continue,
            (e, f) => {
                return format!(
                    "line {number}:\n  generated: {}\n  in file:   {}",
                    e.unwrap_or("(end of page)"),
                    f.unwrap_or("(end of file)")
                );
            }
        }
    }
    "only in the final newline".to_string()
}

/// Fails unless the page at `path` (named `page`) is `generated`; with `TENANTFLUX_BLESS` set,
/// writes it instead. `what` says what the page is made from, `refresh` the command.
pub fn matches_generated(path: &Path, page: &str, generated: &str, what: &str, refresh: &str) {
    if std::env::var_os("TENANTFLUX_BLESS").is_some() {
        fs::create_dir_all(path.parent().expect("a parent")).expect("docs/reference/");
        fs::write(path, generated).unwrap_or_else(|e| panic!("writing {page}: {e}"));
        return;
    }
    let found = fs::read_to_string(path).unwrap_or_default();
    assert!(
        found == generated,
        "{page} is not what {what} says ({}); refresh it with\n  {refresh}",
        first_difference(generated, &found)
    );
}
