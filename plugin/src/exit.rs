//! The process's exit codes: part of the interface, so that a script can tell "blocked by
//! policy" from "agent unreachable" from a typo without reading the message.

use std::{error::Error as StdError, fmt};

use tonic::Code;

use crate::connect::{CallError, ConnectError};

/// How a command ended. The numbers are stable: scripts compare them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    Success = 0,
    /// Anything not named below, and `instance diff` finding differences (as `kubectl diff`).
    Failure = 1,
    /// A flag or argument that cannot be used (clap reports its own with this code too).
    Usage = 2,
    /// The agent could not be reached: no agent pod, a failed port-forward, a broken or timed
    /// out connection. Retrying later may succeed.
    Unreachable = 3,
    /// The agent refused the change under the policy it holds (a FluxInstance the policy does
    /// not allow, a policy it does not accept).
    Refused = 4,
    /// The upgrade plan has blockers, or the agent would not start the upgrade; or adoption is
    /// refused (two installs, another namespace, a rollout without --allow-rollout).
    UpgradeBlocked = 5,
    /// The credentials were rejected, or the caller lacks a permission (RBAC).
    Forbidden = 6,
}

impl Exit {
    /// Every code, in order: the help text and the README list them.
    pub const ALL: [Self; 7] = [
        Self::Success,
        Self::Failure,
        Self::Usage,
        Self::Unreachable,
        Self::Refused,
        Self::UpgradeBlocked,
        Self::Forbidden,
    ];

    pub fn code(self) -> u8 {
        self as u8
    }

    /// One line for `--help`.
    pub fn meaning(self) -> &'static str {
        match self {
            Self::Success => "success (instance diff: no differences)",
            Self::Failure => "failure (instance diff: differences found)",
            Self::Usage => "usage error: a flag or argument that cannot be used",
            Self::Unreachable => {
                "the agent is unreachable (no agent pod, port-forward or connection failed)"
            }
            Self::Refused => "refused by policy: the agent does not allow the change",
            Self::UpgradeBlocked => {
                "blocked: the upgrade plan has blockers or another upgrade runs, or adoption is refused"
            }
            Self::Forbidden => {
                "unauthenticated or forbidden: credentials rejected, or a permission missing"
            }
        }
    }

    /// The code an error ends the command with: the first cause in its chain that says.
    pub fn of(err: &anyhow::Error) -> Self {
        err.chain()
            .find_map(Self::of_cause)
            .unwrap_or(Self::Failure)
    }

    fn of_cause(cause: &(dyn StdError + 'static)) -> Option<Self> {
        if let Some(marked) = cause.downcast_ref::<Marked>() {
            return Some(marked.exit);
        }
        if let Some(err) = cause.downcast_ref::<CallError>() {
            return Some(Self::of_call(err));
        }
        cause.downcast_ref::<ConnectError>().map(Self::of_connect)
    }

    fn of_call(err: &CallError) -> Self {
        match err {
            CallError::Unavailable { .. } | CallError::DeadlineExceeded { .. } => Self::Unreachable,
            CallError::Unauthenticated { .. } | CallError::PermissionDenied { .. } => {
                Self::Forbidden
            }
            // What a refusal means depends on the call: the command marks it (see `on_refusal`).
            CallError::Refused { .. } | CallError::Other { .. } => Self::Failure,
        }
    }

    fn of_connect(err: &ConnectError) -> Self {
        match err {
            ConnectError::TimedOut { .. }
            | ConnectError::ListPods { .. }
            | ConnectError::NoAgentPod { .. }
            | ConnectError::CheckPods { .. }
            | ConnectError::Unreachable { .. } => Self::Unreachable,
            ConnectError::CheckPodsForbidden { .. }
            | ConnectError::TokenRequestForbidden { .. } => Self::Forbidden,
            ConnectError::Kubeconfig { .. }
            | ConnectError::NoConfig { .. }
            | ConnectError::Client { .. }
            | ConnectError::TokenFile { .. }
            | ConnectError::ClientAccountMissing { .. }
            | ConnectError::TokenRequest { .. }
            | ConnectError::InvalidToken
            | ConnectError::IdentityCsr { .. }
            | ConnectError::NoAudience
            | ConnectError::NotTheAgent { .. } => Self::Failure,
        }
    }

    /// `err`, ending the command with `self`.
    pub fn mark(self, err: impl Into<anyhow::Error>) -> anyhow::Error {
        anyhow::Error::new(Marked {
            exit: self,
            inner: err.into(),
        })
    }

    /// A failed call, ending the command with `self` when the agent refused it as a failed
    /// precondition (what the policy or the upgrade planner answers); any other failure keeps
    /// its own code, so an unreachable agent is never reported as a refusal.
    pub fn on_refusal(self, err: CallError) -> anyhow::Error {
        self.of_refusal(&err).mark(err)
    }

    /// The code [`Exit::on_refusal`] gives `err`.
    pub fn of_refusal(self, err: &CallError) -> Self {
        match err {
            CallError::Refused {
                code: Code::FailedPrecondition,
                ..
            } => self,
            other => Self::of_call(other),
        }
    }

    /// The `Exit codes:` section of the top-level `--help`.
    pub fn help() -> String {
        let mut text = String::from("Exit codes:\n");
        for exit in Self::ALL {
            text.push_str(&format!("  {}  {}\n", exit.code(), exit.meaning()));
        }
        text
    }
}

impl From<Exit> for std::process::ExitCode {
    fn from(exit: Exit) -> Self {
        Self::from(exit.code())
    }
}

/// An error that says which code it ends the command with; it reads as the error it wraps.
#[derive(Debug)]
struct Marked {
    exit: Exit,
    inner: anyhow::Error,
}

impl fmt::Display for Marked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.inner, f)
    }
}

impl StdError for Marked {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.inner.source()
    }
}

#[cfg(test)]
mod tests {
    use anyhow::Context as _;

    use super::*;
    use crate::connect::{AgentTarget, call_error};

    fn target() -> AgentTarget {
        AgentTarget::Address("http://127.0.0.1:1".to_owned())
    }

    fn of_status(status: tonic::Status) -> Exit {
        Exit::of(&call_error(&status, &target(), None).into())
    }

    #[test]
    fn the_numbers_are_stable() {
        let codes: Vec<u8> = Exit::ALL.iter().map(|e| e.code()).collect();
        assert_eq!(codes, [0, 1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn grpc_statuses_map_to_codes() {
        assert_eq!(
            of_status(tonic::Status::unavailable("gone")),
            Exit::Unreachable
        );
        assert_eq!(
            of_status(tonic::Status::deadline_exceeded("late")),
            Exit::Unreachable
        );
        assert_eq!(
            of_status(tonic::Status::cancelled("Timeout expired")),
            Exit::Unreachable
        );
        assert_eq!(
            of_status(tonic::Status::unauthenticated("expired")),
            Exit::Forbidden
        );
        assert_eq!(
            of_status(tonic::Status::permission_denied("may not patch")),
            Exit::Forbidden
        );
        assert_eq!(
            of_status(tonic::Status::not_found("no such")),
            Exit::Failure
        );
        assert_eq!(of_status(tonic::Status::internal("boom")), Exit::Failure);
        // Unmarked, a failed precondition is a plain failure: only the command knows whether
        // it was the policy or the upgrade planner that said no.
        assert_eq!(
            of_status(tonic::Status::failed_precondition("breaks policy")),
            Exit::Failure
        );
    }

    #[test]
    fn connect_errors_map_to_codes() {
        let of = |err: ConnectError| Exit::of(&err.into());
        assert_eq!(
            of(ConnectError::NoAgentPod {
                namespace: "tf".to_owned()
            }),
            Exit::Unreachable
        );
        assert_eq!(
            of(ConnectError::Unreachable {
                target: target(),
                cause: "connection refused".to_owned()
            }),
            Exit::Unreachable
        );
        assert_eq!(
            of(ConnectError::TokenRequestForbidden {
                account: "tenantflux-client".to_owned(),
                namespace: "tf".to_owned(),
                message: "forbidden".to_owned()
            }),
            Exit::Forbidden
        );
        assert_eq!(
            of(ConnectError::Kubeconfig {
                cause: "no file".to_owned()
            }),
            Exit::Failure
        );
    }

    #[test]
    fn a_refusal_takes_the_commands_code_and_nothing_else_does() {
        let refusal = |status| call_error(&status, &target(), None);
        let refused = Exit::Refused.on_refusal(refusal(tonic::Status::failed_precondition(
            "breaks policy \"platform\"",
        )));
        assert_eq!(Exit::of(&refused), Exit::Refused);
        assert_eq!(refused.to_string(), "breaks policy \"platform\"");
        let unreachable =
            Exit::UpgradeBlocked.on_refusal(refusal(tonic::Status::unavailable("gone")));
        assert_eq!(Exit::of(&unreachable), Exit::Unreachable);
        let invalid = Exit::Refused.on_refusal(refusal(tonic::Status::invalid_argument("yaml")));
        assert_eq!(Exit::of(&invalid), Exit::Failure);
    }

    #[test]
    fn context_above_a_marked_error_keeps_its_code_and_says_each_part_once() {
        let err = Exit::UpgradeBlocked.mark(anyhow::anyhow!("2 blockers"));
        let err = Err::<(), _>(err).context("upgrade to 2.9.x").unwrap_err();
        assert_eq!(Exit::of(&err), Exit::UpgradeBlocked);
        assert_eq!(format!("{err:#}"), "upgrade to 2.9.x: 2 blockers");
        assert_eq!(Exit::of(&anyhow::anyhow!("plain")), Exit::Failure);
    }

    #[test]
    fn the_help_lists_every_code() {
        let help = Exit::help();
        for exit in Exit::ALL {
            assert!(
                help.contains(&format!("  {}  {}", exit.code(), exit.meaning())),
                "{help}"
            );
        }
    }
}
