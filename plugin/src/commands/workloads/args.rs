//! The arguments of `get`, `suspend`, `resume` and `reconcile`.

use clap::Args;

use crate::{context::RequestTimeout, exit::Exit, grammar};

#[derive(Debug, Args)]
#[command(
    override_usage = "kubectl tenantflux get KIND [NAME] [flags]\n       \
                      kubectl tenantflux get sources git|oci|helm|chart|bucket|external|all [NAME] [flags]\n       \
                      kubectl tenantflux get images repository|policy|update|all [NAME] [flags]\n       \
                      kubectl tenantflux get artifact generators [NAME] [flags]",
    after_help = "KIND, as kubectl names it: all, ks, hr, gitrepo, ocirepo, helmrepo, helmchart, bucket, \
                  externalartifact, imagerepo, imagepolicy, imageupdate, receiver, alert, provider, ag, \
                  instance, fluxreport, rset, rsip (or the kind's name or plural), or the name or \
                  plural of any other kind the cluster serves under a Flux API group. \
                  The flux CLI's words work too: sources …, images …, artifact generators, \
                  kustomizations, helmreleases, alerts, alert-providers, receivers.\n\n\
                  Examples:\n  \
                  kubectl tenantflux get ks -n flux-system\n  \
                  kubectl tenantflux get all -A --status-selector ready=false\n  \
                  kubectl tenantflux get sources git podinfo -o yaml\n  \
                  kubectl tenantflux get hr -A --no-headers --watch"
)]
pub struct GetArgs {
    /// KIND [NAME], or flux's words, e.g. `sources git [NAME]`.
    #[arg(required = true, num_args = 1..=3, value_names = ["KIND", "NAME"])]
    pub words: Vec<String>,
    /// List the objects of every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Only objects whose labels match (Kubernetes selector syntax, e.g. app=podinfo).
    #[arg(
        short = 'l',
        long,
        visible_alias = "label-selector",
        value_name = "SELECTOR"
    )]
    pub selector: Option<String>,
    /// Only objects with this condition status, e.g. ready=false.
    #[arg(long, value_name = "CONDITION=STATUS", value_parser = parse_status_selector)]
    pub status_selector: Option<(String, String)>,
    /// After the list, print each change until interrupted (Ctrl-C).
    #[arg(short, long)]
    pub watch: bool,
    /// Leave the header line out of tables.
    #[arg(long, visible_alias = "no-headers")]
    pub no_header: bool,
}

#[derive(Debug, Args)]
#[command(
    override_usage = "kubectl tenantflux <suspend|resume|reconcile> KIND NAME [flags]\n       \
                      kubectl tenantflux <suspend|resume|reconcile> source git|oci|helm|chart|bucket NAME [flags]\n       \
                      kubectl tenantflux <suspend|resume|reconcile> image repository|policy|update NAME [flags]"
)]
pub struct TargetArgs {
    /// KIND NAME, or flux's words, e.g. `source git NAME`.
    #[arg(required = true, num_args = 2..=3, value_names = ["KIND", "NAME"])]
    pub words: Vec<String>,
}

/// `suspend` and `resume`: one object, or with `--all` every object of one kind.
#[derive(Debug, Args)]
#[command(
    override_usage = "kubectl tenantflux <suspend|resume> KIND NAME [flags]\n       \
                      kubectl tenantflux <suspend|resume> KIND --all [-n NAMESPACE | -A] [flags]\n       \
                      kubectl tenantflux <suspend|resume> source git|oci|helm|chart|bucket NAME [flags]\n       \
                      kubectl tenantflux <suspend|resume> image repository|policy|update NAME [flags]"
)]
pub struct ControlArgs {
    /// KIND NAME, or flux's words, e.g. `source git NAME`; with --all, the kind alone.
    #[arg(required = true, num_args = 1..=3, value_names = ["KIND", "NAME"])]
    pub words: Vec<String>,
    /// Every object of the kind in the namespace (-A: in every namespace), one result line
    /// each; exits 1 if any of them failed.
    #[arg(long)]
    pub all: bool,
    /// With --all: the objects of every namespace.
    #[arg(short = 'A', long, requires = "all")]
    pub all_namespaces: bool,
}

/// What `suspend` or `resume` acts on.
#[derive(Debug, PartialEq, Eq)]
pub enum Control {
    One { kind: String, name: String },
    All { kind: String, all_namespaces: bool },
}

impl ControlArgs {
    pub fn control(&self) -> anyhow::Result<Control> {
        if !self.all {
            let selection = grammar::parse(grammar::Verb::Control, &self.words).map_err(|err| {
                // Only the name missing (the words name a kind): a usage error, as clap's own.
                let kind_only = grammar::parse(grammar::Verb::Get, &self.words)
                    .is_ok_and(|s| s.name.is_none() && !s.several);
                if kind_only {
                    Exit::Usage.mark(anyhow::anyhow!(
                        "{err}, or --all for every object of the kind"
                    ))
                } else {
                    err.into()
                }
            })?;
            let name = selection.name.expect("a control selection has a name");
            return Ok(Control::One {
                kind: selection.kind,
                name,
            });
        }
        let selection = grammar::parse(grammar::Verb::Get, &self.words)?;
        if selection.several {
            return Err(Exit::Usage.mark(anyhow::anyhow!(
                "--all acts on one kind at a time: name it, e.g. `ks --all`"
            )));
        }
        if let Some(name) = selection.name {
            return Err(Exit::Usage.mark(anyhow::anyhow!(
                "--all acts on every object of the kind: drop the name {}",
                tenantflux_core::text::quote(&name)
            )));
        }
        Ok(Control::All {
            kind: selection.kind,
            all_namespaces: self.all_namespaces,
        })
    }
}

/// The `--help` text after the flags of `suspend`, `resume` or `reconcile`: the kinds, then
/// `examples` (each a command line after `kubectl tenantflux`).
pub fn control_help(examples: &[&str]) -> String {
    let mut text = String::from(
        "KIND, as kubectl names it: ks, hr, gitrepo, ocirepo, helmrepo, helmchart, bucket, \
         imagerepo, imagepolicy, imageupdate, receiver, alert, provider, ag, instance, rset, rsip, \
         or the name or plural of any other kind the cluster serves under a Flux API group \
         (suspended by its spec.suspend). \
         The flux CLI's words work too: kustomization, helmrelease, source git, image policy, …\n\n\
         Examples:\n",
    );
    for example in examples {
        text.push_str(&format!("  kubectl tenantflux {example}\n"));
    }
    text
}

impl TargetArgs {
    /// The one object the words name.
    pub fn target(&self) -> anyhow::Result<(String, String)> {
        let selection = grammar::parse(grammar::Verb::Control, &self.words)?;
        let name = selection.name.expect("a control selection has a name");
        Ok((selection.kind, name))
    }
}

#[derive(Debug, Args)]
pub struct ReconcileArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Reconcile the object's source first (Kustomization, HelmRelease).
    #[arg(long)]
    pub with_source: bool,
    /// HelmRelease: force a one-off install or upgrade.
    #[arg(long)]
    pub force: bool,
    /// Wait until the object's Ready condition settles for this request, showing progress on
    /// stderr (the default, as flux does); --wait=false only asks.
    #[arg(
        long,
        default_value_t = true,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_name = "BOOL"
    )]
    pub wait: bool,
    /// How long the wait lasts (0 waits forever).
    #[arg(long, default_value = "5m", value_name = "DURATION")]
    pub timeout: RequestTimeout,
}

pub(super) fn parse_status_selector(value: &str) -> Result<(String, String), String> {
    match value.split_once('=') {
        Some((condition, status)) if !condition.trim().is_empty() => {
            Ok((condition.trim().to_owned(), status.trim().to_owned()))
        }
        _ => Err("expected CONDITION=STATUS, e.g. ready=false".to_owned()),
    }
}
