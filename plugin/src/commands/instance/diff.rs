//! `instance diff`'s line diff of the live and the applied FluxInstance.

/// Lines that take no part in a comparison: they change on every write.
fn volatile(line: &str) -> bool {
    let key = line.trim_start();
    ["resourceVersion:", "generation:"]
        .iter()
        .any(|k| key.starts_with(k))
}

/// A line diff of two YAML texts (`-` live, `+` applied, two-space context for the rest);
/// empty when they are the same.
pub fn diff(live: &str, applied: &str) -> String {
    let a: Vec<&str> = live.lines().filter(|l| !volatile(l)).collect();
    let b: Vec<&str> = applied.lines().filter(|l| !volatile(l)).collect();
    // Longest common subsequence table; FluxInstance manifests are short.
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut out = String::new();
    let mut changed = false;
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            out.push_str(&format!("  {}\n", a[i]));
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            // Removals before additions, as diff(1) shows a changed line.
            out.push_str(&format!("- {}\n", a[i]));
            changed = true;
            i += 1;
        } else {
            out.push_str(&format!("+ {}\n", b[j]));
            changed = true;
            j += 1;
        }
    }
    if changed { out } else { String::new() }
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
    }
}
