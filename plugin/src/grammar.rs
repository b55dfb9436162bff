//! The words that name Flux objects on the command line, in both habits: kubectl's
//! (`get gitrepository app`, `get ks`, `get all`) and the flux CLI's (`get sources git app`,
//! `get images all`, `get artifact generators`, `reconcile source git app`). Pure: the words
//! become what the agent is asked for, a kind name, a category (`sources`, `images`) or `all`,
//! which the agent resolves against the kinds the cluster serves.

use std::{fmt, sync::LazyLock};

use tenantflux_core::kinds::{self, FluxKind};

/// Every kind's name in lower case, in the table's order.
static LOWERCASE: LazyLock<Vec<String>> = LazyLock::new(|| {
    kinds::KINDS
        .iter()
        .map(|k| k.kind.to_ascii_lowercase())
        .collect()
});

/// A sub-word of one of flux's group words: the kind it stands for (`None`: every kind of the
/// group's category, `all`), and whether suspend/resume/reconcile take it (read-only kinds and
/// `all` have no such form in flux).
#[derive(Clone, Copy, Debug)]
struct SubWord {
    word: &'static str,
    kind: Option<&'static str>,
    control: bool,
}

impl SubWord {
    /// flux takes a plural sub-word in the singular too (`artifact generator`).
    fn is(&self, word: &str) -> bool {
        self.word.eq_ignore_ascii_case(word)
            || self
                .word
                .strip_suffix('s')
                .is_some_and(|singular| singular.eq_ignore_ascii_case(word))
    }
}

/// A group word of flux's grammar (`sources`, `images`, `artifact`).
struct Group {
    singular: &'static str,
    /// What its `all` asks the agent for.
    category: Option<&'static str>,
    words: Vec<SubWord>,
}

/// flux's group words: the word in the kind table, its singular, what its `all` asks for.
const GROUPS: &[(&str, &str, Option<&str>)] = &[
    ("sources", "source", Some("sources")),
    ("images", "image", Some("images")),
    ("artifact", "artifact", None),
];

fn group(word: &str) -> Option<Group> {
    let word = word.to_ascii_lowercase();
    let &(name, singular, category) = GROUPS
        .iter()
        .find(|(name, singular, _)| word == *name || word == *singular)?;
    let mut words: Vec<SubWord> = kinds::KINDS
        .iter()
        .filter(|k| k.flux.len() == 2 && k.flux[0] == name)
        .map(|k| SubWord {
            word: k.flux[1],
            kind: Some(k.kind),
            control: k.controllable(),
        })
        .collect();
    if category.is_some() {
        words.push(SubWord {
            word: "all",
            kind: None,
            control: false,
        });
    }
    Some(Group {
        singular,
        category,
        words,
    })
}

/// What the command acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    /// `get`: a kind, a category or `all`, and optionally one name.
    Get,
    /// `suspend`, `resume`, `reconcile`: one kind and one name.
    Control,
}

/// The objects the words name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection {
    /// What the agent is asked for: a kind (its name, plural or short name), a category
    /// (`sources`, `images`) or `all`.
    pub kind: String,
    /// Whether `kind` stands for several kinds (tables are then grouped by kind).
    pub several: bool,
    pub name: Option<String>,
}

/// Why the words name nothing; says what was expected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrammarError(String);

impl fmt::Display for GrammarError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for GrammarError {}

fn error(message: String) -> GrammarError {
    GrammarError(message)
}

/// Reads `words` (the positional arguments after the verb) in either habit.
pub fn parse(verb: Verb, words: &[String]) -> Result<Selection, GrammarError> {
    let Some(first) = words.first() else {
        return Err(error(
            "name a kind, e.g. `ks`, `gitrepository` or `sources git` (flux's words), or `all`"
                .to_owned(),
        ));
    };
    let (kind, several, rest) = match group(first) {
        Some(Group {
            singular,
            category,
            words: subwords,
        }) => {
            let expected = || {
                subwords
                    .iter()
                    .filter(|w| verb == Verb::Get || w.control)
                    .map(|w| w.word)
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let Some(second) = words.get(1) else {
                return Err(error(format!(
                    "`{first}` needs the kind of {singular}: one of {}",
                    expected()
                )));
            };
            let found = subwords
                .iter()
                .find(|w| w.is(second))
                .filter(|w| verb == Verb::Get || w.control);
            match found {
                Some(SubWord {
                    kind: Some(kind), ..
                }) => ((*kind).to_owned(), false, &words[2..]),
                Some(SubWord { kind: None, .. }) => (
                    category
                        .expect("a group with `all` has a category")
                        .to_owned(),
                    true,
                    &words[2..],
                ),
                None => {
                    return Err(error(format!(
                        "unknown {singular} kind {}: expected one of {}",
                        quote(second),
                        expected()
                    )));
                }
            }
        }
        None => {
            let several = first.eq_ignore_ascii_case("all");
            if several && verb == Verb::Control {
                return Err(error(
                    "`all` lists objects; suspend, resume and reconcile need one kind and a name"
                        .to_owned(),
                ));
            }
            (first.clone(), several, &words[1..])
        }
    };
    let name = match rest {
        [] => None,
        [name] => Some(name.clone()),
        [_, extra, ..] => {
            return Err(error(format!(
                "unexpected argument {} after the name: one object at a time",
                quote(extra)
            )));
        }
    };
    if several && name.is_some() {
        return Err(error(
            "a name needs one kind: name the kind instead of `all`".to_owned(),
        ));
    }
    if verb == Verb::Control && name.is_none() {
        return Err(error(format!(
            "name the object: e.g. `{} NAME`",
            words.join(" ")
        )));
    }
    Ok(Selection {
        kind,
        several,
        name,
    })
}

fn quote(word: &str) -> String {
    tenantflux_core::text::quote(word)
}

/// The words that may follow `previous` (the positional words typed so far) for completion:
/// flux's sub-words after a group word, nothing once a kind is known (names come from the
/// cluster).
pub fn next_words(verb: Verb, previous: &[String]) -> Option<Vec<&'static str>> {
    match previous {
        [first] => group(first).map(|g| {
            g.words
                .iter()
                .filter(|w| verb == Verb::Get || w.control)
                .map(|w| w.word)
                .collect()
        }),
        _ => None,
    }
}

/// The first words completion offers: flux's group words and the kinds flux has a word of its
/// own for (plural for `get`, singular for the verbs that take one object), then the word most
/// typed for every other kind (its first short name, else its name); the agent accepts every
/// spelling of a kind.
pub fn first_words(verb: Verb) -> Vec<&'static str> {
    let takes = |k: &FluxKind| verb == Verb::Get || k.controllable();
    let mut words: Vec<&'static str> = GROUPS
        .iter()
        .map(|(plural, singular, _)| {
            if verb == Verb::Get {
                *plural
            } else {
                *singular
            }
        })
        .collect();
    if verb == Verb::Get {
        words.insert(0, "all");
    }
    let own = |k: &FluxKind| (k.flux.len() == 1).then(|| k.flux[0]);
    for kind in kinds::KINDS.iter().filter(|k| takes(k)) {
        if let Some(plural) = own(kind) {
            words.push(match verb {
                Verb::Get => plural,
                Verb::Control => plural.strip_suffix('s').unwrap_or(plural),
            });
        }
    }
    for (kind, lowercase) in kinds::KINDS.iter().zip(LOWERCASE.iter()) {
        if !takes(kind) {
            continue;
        }
        let word = kind.short_names.first().copied();
        // Kinds flux has its own word for are offered by it; a short name besides it is the
        // same word again (`alert-provider`), a kubectl one is not (`ks`).
        match (own(kind), word) {
            (Some(plural), Some(short)) if plural.starts_with(short) => {}
            (Some(_), None) => {}
            (_, Some(short)) => words.push(short),
            (None, None) => words.push(lowercase),
        }
    }
    words
}

/// The verb of a command whose positional words name Flux objects.
pub fn verb_of(command: &str) -> Option<Verb> {
    match command {
        "get" => Some(Verb::Get),
        "suspend" | "resume" | "reconcile" | "events" | "tree" => Some(Verb::Control),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_owned).collect()
    }

    fn get(line: &str) -> Result<Selection, GrammarError> {
        parse(Verb::Get, &words(line))
    }

    fn control(line: &str) -> Result<Selection, GrammarError> {
        parse(Verb::Control, &words(line))
    }

    fn one(kind: &str, name: Option<&str>) -> Selection {
        Selection {
            kind: kind.into(),
            several: false,
            name: name.map(str::to_owned),
        }
    }

    fn several(kind: &str) -> Selection {
        Selection {
            kind: kind.into(),
            several: true,
            name: None,
        }
    }

    #[test]
    fn flux_get_words_name_the_same_kinds() {
        assert_eq!(get("sources git"), Ok(one("GitRepository", None)));
        assert_eq!(
            get("source git app3"),
            Ok(one("GitRepository", Some("app3")))
        );
        assert_eq!(get("sources oci"), Ok(one("OCIRepository", None)));
        assert_eq!(get("sources helm"), Ok(one("HelmRepository", None)));
        assert_eq!(get("sources chart"), Ok(one("HelmChart", None)));
        assert_eq!(get("sources bucket"), Ok(one("Bucket", None)));
        assert_eq!(get("sources external"), Ok(one("ExternalArtifact", None)));
        assert_eq!(get("Sources ALL"), Ok(several("sources")));
        assert_eq!(get("images repository"), Ok(one("ImageRepository", None)));
        assert_eq!(get("images policy p"), Ok(one("ImagePolicy", Some("p"))));
        assert_eq!(get("image update"), Ok(one("ImageUpdateAutomation", None)));
        assert_eq!(get("images all"), Ok(several("images")));
        assert_eq!(
            get("artifact generators"),
            Ok(one("ArtifactGenerator", None))
        );
        // flux's top-level kinds are kubectl-style words the agent knows as they are.
        for word in [
            "alerts",
            "alert-providers",
            "receivers",
            "kustomizations",
            "helmreleases",
        ] {
            assert_eq!(get(word), Ok(one(word, None)));
        }
    }

    #[test]
    fn kubectl_words_still_work() {
        assert_eq!(get("ks"), Ok(one("ks", None)));
        assert_eq!(
            get("gitrepository app"),
            Ok(one("gitrepository", Some("app")))
        );
        assert_eq!(get("all"), Ok(several("all")));
        assert_eq!(control("ks apps"), Ok(one("ks", Some("apps"))));
        // An object may be called like one of flux's words.
        assert_eq!(
            get("gitrepository sources"),
            Ok(one("gitrepository", Some("sources")))
        );
    }

    #[test]
    fn flux_control_words() {
        assert_eq!(
            control("source git app3"),
            Ok(one("GitRepository", Some("app3")))
        );
        assert_eq!(
            control("sources oci x"),
            Ok(one("OCIRepository", Some("x")))
        );
        assert_eq!(
            control("image update u"),
            Ok(one("ImageUpdateAutomation", Some("u")))
        );
        assert_eq!(
            control("kustomization app"),
            Ok(one("kustomization", Some("app")))
        );
        assert_eq!(
            control("helmrelease web"),
            Ok(one("helmrelease", Some("web")))
        );
    }

    #[test]
    fn mistakes_say_what_was_expected() {
        let message = |r: Result<Selection, GrammarError>| r.unwrap_err().to_string();
        assert_eq!(
            message(get("sources")),
            "`sources` needs the kind of source: one of oci, bucket, git, helm, chart, external, all"
        );
        assert_eq!(
            message(get("sources svn")),
            "unknown source kind \"svn\": expected one of oci, bucket, git, helm, chart, external, all"
        );
        assert_eq!(
            message(control("source all")),
            "unknown source kind \"all\": expected one of oci, bucket, git, helm, chart"
        );
        assert!(message(control("source external e")).contains("unknown source kind"));
        assert_eq!(
            message(control("source git")),
            "name the object: e.g. `source git NAME`"
        );
        assert_eq!(
            message(get("sources git a b")),
            "unexpected argument \"b\" after the name: one object at a time"
        );
        assert!(message(get("all x")).contains("a name needs one kind"));
        assert!(message(get("sources all x")).contains("a name needs one kind"));
        assert!(message(control("all x")).contains("need one kind"));
        assert!(message(get("")).contains("name a kind"));
    }

    #[test]
    fn first_words_come_from_the_kind_table() {
        assert_eq!(
            first_words(Verb::Control),
            [
                "source",
                "image",
                "artifact",
                "helmrelease",
                "kustomization",
                "receiver",
                "alert-provider",
                "alert",
                "ocirepo",
                "bucket",
                "gitrepo",
                "helmrepo",
                "helmchart",
                "imagerepo",
                "imagepolicy",
                "imageupdate",
                "hr",
                "ks",
                "ag",
                "instance",
                "rset",
                "rsip",
            ]
        );
        let get = first_words(Verb::Get);
        assert_eq!(
            get[..9],
            [
                "all",
                "sources",
                "images",
                "artifact",
                "helmreleases",
                "kustomizations",
                "receivers",
                "alert-providers",
                "alerts"
            ]
        );
        for word in ["externalartifact", "report", "ks", "hr", "rsip"] {
            assert!(get.contains(&word), "{word} in {get:?}");
        }
        assert!(
            !get.contains(&"alert"),
            "flux's own word stands for it: {get:?}"
        );
    }

    #[test]
    fn completion_offers_flux_sub_words() {
        assert_eq!(
            next_words(Verb::Get, &words("sources")),
            Some(vec![
                "oci", "bucket", "git", "helm", "chart", "external", "all"
            ])
        );
        assert_eq!(
            next_words(Verb::Control, &words("image")),
            Some(vec!["repository", "policy", "update"])
        );
        assert_eq!(next_words(Verb::Get, &words("ks")), None);
        assert_eq!(next_words(Verb::Get, &words("sources git")), None);
        // Every first word parses, alone (get) or with a name (control), or is a group word.
        for word in first_words(Verb::Get) {
            assert!(get(word).is_ok() || group(word).is_some(), "{word}");
        }
        for word in first_words(Verb::Control) {
            let line = format!("{word} x");
            assert!(control(&line).is_ok() || group(word).is_some(), "{word}");
        }
    }
}
