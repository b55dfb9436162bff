//! URL and registry patterns of a policy: `*` matches any run of characters (slashes too, so
//! `https://github.com/acme/*` covers every repository of acme), `?` one character, everything
//! else itself. The same pattern is rendered as an RE2 regular expression for the
//! ValidatingAdmissionPolicy, so the agent and the API server agree.

/// Whether `text` matches `pattern` as a whole.
pub fn matches(pattern: &str, text: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let text: Vec<char> = text.chars().collect();
    // Greedy match with one backtrack point (the last `*`): linear enough for short patterns.
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some('*') => {
                star = Some((p, t));
                p += 1;
            }
            Some('?') => {
                p += 1;
                t += 1;
            }
            Some(&c) if c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((star_p, star_t)) => {
                    p = star_p + 1;
                    t = star_t + 1;
                    star = Some((star_p, star_t + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == '*')
}

/// The pattern as an anchored RE2 expression (CEL's `matches`).
pub fn to_regex(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 8);
    out.push('^');
    for c in pattern.chars() {
        match c {
            '*' => out.push_str(".*"),
            '?' => out.push('.'),
            c if "\\.+()[]{}|^$".contains(c) => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out.push('$');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stars_and_question_marks() {
        let yes = [
            ("https://github.com/acme/*", "https://github.com/acme/fleet"),
            (
                "https://github.com/acme/*",
                "https://github.com/acme/a/b.git",
            ),
            ("ghcr.io/fluxcd", "ghcr.io/fluxcd"),
            ("*.example.com/flux", "registry.example.com/flux"),
            ("oci://ghcr.io/acme/?", "oci://ghcr.io/acme/x"),
            ("*", ""),
            ("a*b*c", "aXbYbZc"),
        ];
        for (pattern, text) in yes {
            assert!(matches(pattern, text), "{pattern} ~ {text}");
        }
        let no = [
            ("https://github.com/acme/*", "https://github.com/evil/acme"),
            ("ghcr.io/fluxcd", "ghcr.io/fluxcd2"),
            ("oci://ghcr.io/acme/?", "oci://ghcr.io/acme/xy"),
            ("a*b*c", "aXbYbZ"),
        ];
        for (pattern, text) in no {
            assert!(!matches(pattern, text), "{pattern} !~ {text}");
        }
    }

    #[test]
    fn regex_escapes_everything_but_the_wildcards() {
        assert_eq!(
            to_regex("https://github.com/acme/*"),
            "^https://github\\.com/acme/.*$"
        );
        assert_eq!(to_regex("a?(b)+$"), "^a.\\(b\\)\\+\\$$");
    }
}
