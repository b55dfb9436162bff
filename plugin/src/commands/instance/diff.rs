//! `instance diff`'s line diff of the live and the applied FluxInstance.

use similar::{ChangeTag, DiffTag, TextDiff};

/// Lines that take no part in a comparison: they change on every write.
fn volatile(line: &str) -> bool {
    let key = line.trim_start();
    ["resourceVersion:", "generation:"]
        .iter()
        .any(|k| key.starts_with(k))
}

/// A line diff of two YAML texts (`-` live, `+` applied, two-space context for the rest, every
/// line shown); empty when they are the same.
pub fn diff(live: &str, applied: &str) -> String {
    let a: Vec<&str> = live.lines().filter(|l| !volatile(l)).collect();
    let b: Vec<&str> = applied.lines().filter(|l| !volatile(l)).collect();
    let lines = TextDiff::from_slices(&a, &b);
    if lines.ops().iter().all(|op| op.tag() == DiffTag::Equal) {
        return String::new();
    }
    // A changed line comes out as its removal, then its addition, as diff(1) shows it.
    lines
        .iter_all_changes()
        .map(|change| {
            let mark = match change.tag() {
                ChangeTag::Equal => ' ',
                ChangeTag::Delete => '-',
                ChangeTag::Insert => '+',
            };
            format!("{mark} {}\n", change.value())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_marks_removed_and_added_lines() {
        let live = "spec:\n  version: 2.8.x\n  registry: ghcr.io/fluxcd\nresourceVersion: \"1\"\n";
        let applied =
            "spec:\n  version: 2.9.x\n  registry: ghcr.io/fluxcd\nresourceVersion: \"2\"\n";
        assert_eq!(
            diff(live, applied),
            "  spec:\n-   version: 2.8.x\n+   version: 2.9.x\n    registry: ghcr.io/fluxcd\n"
        );
        assert_eq!(diff(live, live), "");
        assert_eq!(diff("", "a: 1\n"), "+ a: 1\n");
        assert_eq!(diff("a: 1\n", ""), "- a: 1\n");
        assert_eq!(
            diff("a: 1\nb: 2\nc: 3\n", "a: 1\nb: 4\nc: 5\n"),
            "  a: 1\n- b: 2\n- c: 3\n+ b: 4\n+ c: 5\n"
        );
        assert_eq!(diff(live, &live.replace("\"1\"", "\"9\"")), "");
    }
}
