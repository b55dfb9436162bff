//! How error text quotes what a caller sent, and how an error and its causes read on one line.

/// How much of a caller's text an error message quotes.
const QUOTE: usize = 64;
/// How much of each cause [`chain`] keeps: causes come from libraries (a YAML parser's
/// "invalid type: string \"…\"" quotes the whole string), not from our own bounded messages.
const CAUSE: usize = 512;

/// `text` quoted (`"…"`), cut to its first 64 characters when longer, saying how long it was:
/// a message that quoted a megabyte of input would travel in a gRPC trailer.
pub fn quote(text: &str) -> String {
    match text.char_indices().nth(QUOTE) {
        None => format!("{text:?}"),
        Some((end, _)) => format!("{:?}… ({} bytes)", &text[..end], text.len()),
    }
}

/// `error: cause: cause` on one line, for a gRPC message, a status problem or an Event. A cause
/// whose text its parent already contains is left out (errors that format `{source}` into
/// their own message would otherwise repeat it); each cause is cut to its first 512
/// characters, since a library's error may quote its whole input.
pub fn chain(err: &dyn std::error::Error) -> String {
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            match text.char_indices().nth(CAUSE) {
                None => message.push_str(&text),
                Some((end, _)) => {
                    message.push_str(&text[..end]);
                    message.push_str(&format!("… ({} bytes)", text.len()));
                }
            }
        }
        source = cause.source();
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_are_cut_to_64_characters() {
        assert_eq!(quote("ks"), "\"ks\"");
        let long = "x".repeat(100_000);
        let quoted = quote(&long);
        assert_eq!(quoted, format!("\"{}\"… (100000 bytes)", "x".repeat(64)));
        // Cut on a character boundary.
        let wide = "é".repeat(100);
        assert!(quote(&wide).ends_with("… (200 bytes)"));
    }

    #[derive(Debug, thiserror::Error)]
    enum Outer {
        #[error("applying ConfigMap a/b")]
        Plain(#[source] Inner),
        #[error("reading the bundle: {0}")]
        Repeats(#[source] Inner),
    }

    #[derive(Debug, thiserror::Error)]
    #[error("connection refused")]
    struct Inner;

    #[test]
    fn chains_read_as_one_line_without_repeats() {
        assert_eq!(
            chain(&Outer::Plain(Inner)),
            "applying ConfigMap a/b: connection refused"
        );
        assert_eq!(
            chain(&Outer::Repeats(Inner)),
            "reading the bundle: connection refused"
        );
    }

    #[derive(Debug, thiserror::Error)]
    #[error("parsing")]
    struct Parsing(#[source] Echo);

    #[derive(Debug, thiserror::Error)]
    #[error("invalid type: string {0:?}")]
    struct Echo(String);

    #[test]
    fn a_cause_that_echoes_its_input_is_cut() {
        let message = chain(&Parsing(Echo("a".repeat(1 << 20))));
        assert!(message.len() < 600, "{} bytes", message.len());
        assert!(message.starts_with("parsing: invalid type: string \"aaa"));
        assert!(message.ends_with(&format!("… ({} bytes)", (1 << 20) + 23)));
    }
}
