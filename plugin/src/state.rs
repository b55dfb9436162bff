//! Every state the agent reports, mapped once to its word and its colour. Views hold the wire
//! enum; the tables, `-o json|yaml` (through [`word`]) and both dashboards read the word and
//! the colour here, so a state reads the same everywhere. UNSPECIFIED (an agent of another
//! release, or a value this plugin does not know) reads as unknown.

use maud::Markup;
use serde::Serializer;
use tenantflux_proto::v1 as pb;

use crate::{
    output::{self, Cell, Style},
    web::page::{self, Tone},
};

/// A state the agent reports, with its word and its colour.
pub trait State: Copy {
    /// The word tables, pages and `-o json|yaml` show.
    fn word(self) -> &'static str;

    /// Its colour: the CSS class on the dashboards.
    fn tone(self) -> Tone;

    /// Its colour in a terminal, which paints only good (green) and bad (red).
    fn terminal(self) -> output::Tone {
        match self.tone() {
            Tone::Good => output::Tone::Good,
            Tone::Bad => output::Tone::Bad,
            Tone::Warn | Tone::Muted => output::Tone::Plain,
        }
    }

    /// The word, painted for a terminal.
    fn paint(self, style: Style) -> String {
        style.paint(self.word(), self.terminal())
    }

    /// The word as a table cell.
    fn cell(self) -> Cell {
        Cell::toned(self.word(), self.terminal())
    }

    /// The word as a dashboard's badge.
    fn badge(self) -> Markup {
        page::badge(self.word(), self.tone())
    }
}

impl State for pb::Health {
    fn word(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Degraded => "degraded",
            Self::Unspecified => "unknown",
        }
    }

    fn tone(self) -> Tone {
        match self {
            Self::Ok => Tone::Good,
            Self::Degraded => Tone::Bad,
            Self::Unspecified => Tone::Muted,
        }
    }
}

impl State for pb::OperatorPhase {
    fn word(self) -> &'static str {
        match self {
            Self::NotInstalled => "not-installed",
            Self::WaitingForApi => "waiting-for-api",
            Self::ApplyingCrds => "applying-crds",
            Self::WaitingForOperator => "waiting-for-operator",
            Self::Ready => "ready",
            Self::Failed => "failed",
            Self::Unspecified => "unknown",
        }
    }

    fn tone(self) -> Tone {
        match self {
            Self::Ready => Tone::Good,
            Self::Failed => Tone::Bad,
            Self::WaitingForApi | Self::ApplyingCrds | Self::WaitingForOperator => Tone::Warn,
            Self::NotInstalled | Self::Unspecified => Tone::Muted,
        }
    }
}

/// As Kubernetes writes it (`True`, `False`, `Unknown`), which `-o json|yaml` keeps.
impl State for pb::ConditionStatus {
    fn word(self) -> &'static str {
        match self {
            Self::True => "True",
            Self::False => "False",
            Self::Unknown | Self::Unspecified => "Unknown",
        }
    }

    fn tone(self) -> Tone {
        match self {
            Self::True => Tone::Good,
            Self::False => Tone::Bad,
            Self::Unknown | Self::Unspecified => Tone::Muted,
        }
    }
}

impl State for pb::UpgradePhase {
    fn word(self) -> &'static str {
        match self {
            Self::Migrating => "migrating",
            Self::Bumping => "bumping",
            Self::Waiting => "waiting",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Unspecified => "unknown",
        }
    }

    fn tone(self) -> Tone {
        match self {
            Self::Succeeded => Tone::Good,
            Self::Failed => Tone::Bad,
            Self::Migrating | Self::Bumping | Self::Waiting => Tone::Warn,
            Self::Unspecified => Tone::Muted,
        }
    }
}

/// A readiness the agent reports as a flag (a component's) read as a condition's status.
pub fn ready(ready: bool) -> pb::ConditionStatus {
    if ready {
        pb::ConditionStatus::True
    } else {
        pb::ConditionStatus::False
    }
}

/// A condition's status; none before the controller first reports the condition.
pub fn condition(condition: Option<&pb::Condition>) -> pb::ConditionStatus {
    condition.map_or(pb::ConditionStatus::Unknown, pb::Condition::status)
}

/// For `#[serde(serialize_with = "crate::state::word")]`: a state is its word in
/// `-o json|yaml`.
pub fn word<T: State, S: Serializer>(state: &T, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(state.word())
}

/// [`word`] of an optional state (none is null).
pub fn optional_word<T: State, S: Serializer>(
    state: &Option<T>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match state {
        Some(state) => serializer.serialize_some(state.word()),
        None => serializer.serialize_none(),
    }
}

/// A condition's status from the word Kubernetes writes, for tests written with words.
#[cfg(test)]
pub fn parse_condition(word: &str) -> pb::ConditionStatus {
    pb::ConditionStatus::from_str_name(&format!("CONDITION_STATUS_{}", word.to_uppercase()))
        .unwrap_or_else(|| panic!("not a condition status: {word:?}"))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// Every value of a wire enum this build knows (prost gives no list of them).
    fn all<T: TryFrom<i32>>() -> Vec<T> {
        (0..64).filter_map(|n| T::try_from(n).ok()).collect()
    }

    /// Every value has a word of its own and a colour; the word is the wire name's (so
    /// `-o json|yaml` keeps the words it always had), but UNSPECIFIED reads as unknown.
    fn check<T: State + TryFrom<i32> + PartialEq + std::fmt::Debug>(
        prefix: &str,
        name: fn(&T) -> &'static str,
        unspecified: T,
    ) {
        let values = all::<T>();
        assert!(values.len() > 1, "{prefix}: {values:?}");
        let words: BTreeSet<&str> = values.iter().map(|v| v.word()).collect();
        for value in values {
            let word = value.word();
            assert!(!word.is_empty(), "{value:?}");
            assert!(
                !page::badge(word, value.tone()).into_string().is_empty(),
                "{value:?}"
            );
            let wire = name(&value)
                .strip_prefix(prefix)
                .unwrap()
                .to_ascii_lowercase();
            if value == unspecified {
                assert_eq!(wire, "unspecified");
                assert!(word.eq_ignore_ascii_case("unknown"), "{value:?}: {word}");
                assert_eq!(value.tone(), Tone::Muted, "{value:?}");
            } else {
                assert_eq!(word.to_ascii_lowercase().replace('-', "_"), wire);
            }
        }
        // Each known value reads apart, but for conditions, whose UNKNOWN and UNSPECIFIED
        // both read Unknown.
        assert!(words.len() >= all::<T>().len() - 1, "{prefix}: {words:?}");
    }

    #[test]
    fn every_health_has_a_word_and_a_colour() {
        check("HEALTH_", pb::Health::as_str_name, pb::Health::Unspecified);
        assert_eq!(all::<pb::Health>().len(), 3);
    }

    #[test]
    fn every_operator_phase_has_a_word_and_a_colour() {
        check(
            "OPERATOR_PHASE_",
            pb::OperatorPhase::as_str_name,
            pb::OperatorPhase::Unspecified,
        );
    }

    #[test]
    fn every_condition_status_has_a_word_and_a_colour() {
        check(
            "CONDITION_STATUS_",
            pb::ConditionStatus::as_str_name,
            pb::ConditionStatus::Unspecified,
        );
        // As Kubernetes writes them.
        assert_eq!(pb::ConditionStatus::True.word(), "True");
        assert_eq!(pb::ConditionStatus::False.word(), "False");
        assert_eq!(pb::ConditionStatus::Unknown.word(), "Unknown");
    }

    #[test]
    fn every_upgrade_phase_has_a_word_and_a_colour() {
        check(
            "UPGRADE_PHASE_",
            pb::UpgradePhase::as_str_name,
            pb::UpgradePhase::Unspecified,
        );
    }

    #[test]
    fn only_good_and_bad_are_painted_in_a_terminal() {
        assert_eq!(pb::Health::Ok.terminal(), output::Tone::Good);
        assert_eq!(pb::Health::Degraded.terminal(), output::Tone::Bad);
        assert_eq!(pb::UpgradePhase::Waiting.terminal(), output::Tone::Plain);
        assert_eq!(pb::ConditionStatus::Unknown.terminal(), output::Tone::Plain);
        assert_eq!(
            pb::OperatorPhase::Ready.paint(Style { color: true }),
            "\x1b[32mready\x1b[0m"
        );
    }

    #[test]
    fn a_missing_condition_and_a_flag_read_as_conditions() {
        assert_eq!(condition(None), pb::ConditionStatus::Unknown);
        let failed = pb::Condition {
            status: pb::ConditionStatus::False.into(),
            ..pb::Condition::default()
        };
        assert_eq!(condition(Some(&failed)), pb::ConditionStatus::False);
        assert_eq!(ready(true).word(), "True");
        assert_eq!(ready(false).word(), "False");
    }

    #[test]
    fn a_state_is_its_word_in_json() {
        #[derive(serde::Serialize)]
        struct View {
            #[serde(serialize_with = "word")]
            phase: pb::OperatorPhase,
            #[serde(serialize_with = "optional_word")]
            ready: Option<pb::ConditionStatus>,
            #[serde(serialize_with = "optional_word")]
            none: Option<pb::ConditionStatus>,
        }
        let view = View {
            phase: pb::OperatorPhase::WaitingForApi,
            ready: Some(pb::ConditionStatus::Unspecified),
            none: None,
        };
        assert_eq!(
            serde_json::to_value(view).unwrap(),
            serde_json::json!({"phase": "waiting-for-api", "ready": "Unknown", "none": null})
        );
    }
}
