//! The words that name Flux objects on the command line, in both habits: kubectl's
//! (`get gitrepository app`, `get ks`, `get all`) and the flux CLI's (`get sources git app`,
//! `get images all`, `get artifact generators`, `reconcile source git app`). Pure: the words
//! become what the agent is asked for, a kind name, a category (`sources`, `images`) or `all`,
//! which the agent resolves against the kinds the cluster serves.

use std::fmt;

/// A sub-word, the kind it stands for (`None`: every kind of the group's category), and whether
/// suspend/resume/reconcile take it (read-only kinds and `all` have no such form in flux).
type SubWord = (&'static str, Option<&'static str>, bool);

/// The sub-words of `flux get sources`.
const SOURCES: &[SubWord] = &[
    ("git", Some("GitRepository"), true),
    ("oci", Some("OCIRepository"), true),
    ("helm", Some("HelmRepository"), true),
    ("chart", Some("HelmChart"), true),
    ("bucket", Some("Bucket"), true),
    ("external", Some("ExternalArtifact"), false),
    ("all", None, false),
];

/// The sub-words of `flux get images`.
const IMAGES: &[SubWord] = &[
    ("repository", Some("ImageRepository"), true),
    ("policy", Some("ImagePolicy"), true),
    ("update", Some("ImageUpdateAutomation"), true),
    ("all", None, false),
];

/// `flux get artifact generators`.
const ARTIFACTS: &[SubWord] = &[
    ("generators", Some("ArtifactGenerator"), true),
    ("generator", Some("ArtifactGenerator"), true),
];

/// A group word of flux's grammar (`sources`, `images`, `artifact`).
struct Group {
    singular: &'static str,
    /// What its `all` asks the agent for.
    category: Option<&'static str>,
    words: &'static [SubWord],
}

fn group(word: &str) -> Option<Group> {
    let (singular, category, words) = match word.to_ascii_lowercase().as_str() {
        "sources" | "source" => ("source", Some("sources"), SOURCES),
        "images" | "image" => ("image", Some("images"), IMAGES),
        "artifacts" | "artifact" => ("artifact", None, ARTIFACTS),
        _ => return None,
    };
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
                    .filter(|(_, _, control)| verb == Verb::Get || *control)
                    .map(|(w, _, _)| *w)
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
                .find(|(w, _, _)| w.eq_ignore_ascii_case(second))
                .filter(|(_, _, control)| verb == Verb::Get || *control);
            match found {
                Some((_, Some(kind), _)) => ((*kind).to_owned(), false, &words[2..]),
                Some((_, None, _)) => (
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
                .filter(|(_, _, control)| verb == Verb::Get || *control)
                .map(|(w, _, _)| *w)
                .collect()
        }),
        _ => None,
    }
}

/// The first words completion offers: flux's group words and top-level kinds, then kubectl's
/// short names (the agent accepts every spelling of a kind; these are the ones typed most).
pub fn first_words(verb: Verb) -> &'static [&'static str] {
    match verb {
        Verb::Get => &[
            "all",
            "sources",
            "images",
            "artifact",
            "kustomizations",
            "helmreleases",
            "alerts",
            "alert-providers",
            "receivers",
            "ks",
            "hr",
            "gitrepo",
            "ocirepo",
            "helmrepo",
            "helmchart",
            "bucket",
            "externalartifact",
            "imagerepo",
            "imagepolicy",
            "imageupdate",
            "ag",
            "instance",
            "fluxreport",
            "rset",
            "rsip",
        ],
        Verb::Control => &[
            "source",
            "image",
            "artifact",
            "kustomization",
            "helmrelease",
            "alert",
            "alert-provider",
            "receiver",
            "ks",
            "hr",
            "gitrepo",
            "ocirepo",
            "helmrepo",
            "helmchart",
            "bucket",
            "imagerepo",
            "imagepolicy",
            "imageupdate",
            "ag",
            "instance",
            "rset",
            "rsip",
        ],
    }
}

/// The verb of a command whose positional words name Flux objects.
pub fn verb_of(command: &str) -> Option<Verb> {
    match command {
        "get" => Some(Verb::Get),
        "suspend" | "resume" | "reconcile" => Some(Verb::Control),
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
            "`sources` needs the kind of source: one of git, oci, helm, chart, bucket, external, all"
        );
        assert_eq!(
            message(get("sources svn")),
            "unknown source kind \"svn\": expected one of git, oci, helm, chart, bucket, external, all"
        );
        assert_eq!(
            message(control("source all")),
            "unknown source kind \"all\": expected one of git, oci, helm, chart, bucket"
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
    fn completion_offers_flux_sub_words() {
        assert_eq!(
            next_words(Verb::Get, &words("sources")),
            Some(vec![
                "git", "oci", "helm", "chart", "bucket", "external", "all"
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
