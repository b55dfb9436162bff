//! The project's one YAML stack: serde-saphyr, which kube-client already brings. It forbids
//! unsafe code and parses within input budgets (nodes, depth, aliases, documents), so a hostile
//! document fails instead of exhausting memory. Signed policies are unaffected by the parser:
//! the signature covers the verbatim text.
//!
//! Every parse and print goes through here, so the dialect is the same everywhere: YAML 1.2
//! booleans only (`yes` stays a string, as with the Kubernetes API's own JSON), errors as one
//! line with the position (no source snippet, which would echo input into messages), and long
//! strings printed on one line rather than folded, as kubectl prints them.

use std::fmt;

use serde::{Serialize, de::DeserializeOwned};

pub use serde_saphyr::SerializeError;

/// A YAML text that did not parse, or did not fit the type it was read as. It says where (line
/// and column) and, when a field had the wrong type, which field (`spec.generation: …`).
#[derive(Debug)]
pub struct Error {
    path: Option<String>,
    /// Boxed: serde-saphyr's error is large, and every result carrying this one would be too.
    inner: Box<serde_saphyr::Error>,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = self
            .inner
            .location()
            .map(|l| format!(" at line {}, column {}", l.line(), l.column()))
            .unwrap_or_default();
        match original(&self.inner) {
            serde_saphyr::Error::MultipleDocuments { .. } => write!(
                f,
                "more than one document (separated by ---) where one is expected{at}"
            ),
            serde_saphyr::Error::Budget { breach, .. } => write!(
                f,
                "the document exceeds the parser's limits ({breach:?}){at}: aliases that expand \
                 too far, nesting too deep, or far too many nodes"
            ),
            _ => match &self.path {
                Some(path) => write!(f, "{path}: {}", self.inner),
                None => write!(f, "{}", self.inner),
            },
        }
    }
}

impl std::error::Error for Error {}

/// The error under serde-saphyr's wrappers (the alias it was reached through, a snippet).
fn original(mut err: &serde_saphyr::Error) -> &serde_saphyr::Error {
    while let serde_saphyr::Error::AliasError { error, .. }
    | serde_saphyr::Error::WithSnippet { error, .. } = err
    {
        err = error;
    }
    err
}

impl From<serde_saphyr::Error> for Error {
    fn from(inner: serde_saphyr::Error) -> Self {
        Self {
            path: None,
            inner: Box::new(inner),
        }
    }
}

fn options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        strict_booleans: true,
        with_snippet: false,
    }
}

/// Parses one YAML document.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, Error> {
    let mut path = None;
    serde_saphyr::with_deserializer_from_str_with_options(text, options(), |deserializer| {
        serde_path_to_error::deserialize(deserializer).map_err(|err| {
            let at = err.path().to_string();
            path = (at != ".").then_some(at);
            err.into_inner()
        })
    })
    .map_err(|inner| Error {
        path,
        inner: Box::new(inner),
    })
}

/// Parses one YAML document from bytes (UTF-8).
pub fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Error> {
    let text = std::str::from_utf8(bytes).map_err(|_| serde_saphyr::Error::InvalidUtf8Input)?;
    from_str(text)
}

/// The documents of a multi-document stream (`---` separated) in order, empty ones skipped.
/// The first document that does not parse, or does not fit `T`, fails the whole stream; the
/// error says where.
pub fn documents<T: DeserializeOwned>(text: &str) -> Result<Vec<T>, Error> {
    Ok(serde_saphyr::from_str_multiple_with_options::<T, Vec<T>>(
        text,
        options(),
    )?)
}

/// Prints `value` as one YAML document: block style, strings with newlines as literal blocks
/// (`|`), others on one line.
pub fn to_string<T: Serialize>(value: &T) -> Result<String, SerializeError> {
    let options = serde_saphyr::ser_options! {
        folded_wrap_chars: usize::MAX,
    };
    serde_saphyr::to_string_with_options(value, options)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn yaml_1_1_booleans_stay_strings() {
        let value: Value = from_str("a: yes\nb: on\nc: true\n").unwrap();
        assert_eq!(value, json!({"a": "yes", "b": "on", "c": true}));
    }

    #[test]
    fn multi_document_streams_skip_empty_documents() {
        let docs: Vec<Value> = documents("---\na: 1\n---\n---\nb: 2\n...\n").unwrap();
        assert_eq!(docs, vec![json!({"a": 1}), json!({"b": 2})]);
        assert!(documents::<Value>("").unwrap().is_empty());
    }

    #[test]
    fn errors_are_one_line_with_the_position_and_no_snippet() {
        let err = from_str::<Value>("a: [1, 2\nb: 3\n")
            .unwrap_err()
            .to_string();
        assert!(!err.contains('\n'), "{err}");
        assert!(err.contains("line"), "{err}");
    }

    #[test]
    fn strings_round_trip_and_long_ones_stay_on_one_line() {
        let long = "word ".repeat(40);
        let value = json!({
            "long": long,
            "multi": "line one\nline two\n",
            "yes": "yes",
            "number": "0123",
            "empty": "",
        });
        let text = to_string(&value).unwrap();
        assert!(text.contains("multi: |"), "{text}");
        assert!(
            text.lines()
                .any(|l| l.starts_with("long: ") && l.len() > 200),
            "{text}"
        );
        let back: Value = from_str(&text).unwrap();
        assert_eq!(back, value, "{text}");
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Doc {
        spec: Spec,
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Spec {
        generation: u64,
    }

    #[test]
    fn a_field_of_the_wrong_type_is_named_by_its_path() {
        let err = from_str::<Doc>("spec:\n  generation: seven\n")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("spec.generation: "), "{err}");
        assert!(err.contains("line 2"), "{err}");
    }

    #[test]
    fn two_documents_where_one_is_expected_say_so() {
        let err = from_str::<Value>("a: 1\n---\nb: 2\n")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("more than one document"), "{err}");
        assert!(!err.contains("from_str_multiple"), "{err}");
    }

    #[test]
    fn a_billion_laughs_fails_within_the_budget() {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..10 {
            let prev = i - 1;
            text.push_str(&format!(
                "a{i}: &a{i} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"
            ));
        }
        let err = from_str::<Value>(&text).unwrap_err().to_string();
        assert!(err.contains("exceeds the parser's limits"), "{err}");
    }
}
