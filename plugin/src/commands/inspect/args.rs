//! The arguments of `events`, `tree`, `trace` and `stats`.

use clap::Args;

#[derive(Debug, Args)]
#[command(
    override_usage = "kubectl tenantflux events [KIND NAME] [-n NAMESPACE | -A] [-w] [--types Warning]",
    after_help = "KIND NAME, as `get` names them (ks apps, source git podinfo, …): only the Events of that \
                  object and of its source, as `flux events --for` shows them.\n\n\
                  Examples:\n  \
                  kubectl tenantflux events -n flux-system\n  \
                  kubectl tenantflux events ks apps -n flux-system --types Warning\n  \
                  kubectl tenantflux events -A -w"
)]
pub struct EventsArgs {
    /// KIND NAME, or flux's words, e.g. `source git NAME`.
    #[arg(num_args = 0..=3, value_names = ["KIND", "NAME"])]
    pub words: Vec<String>,
    /// The Events of every namespace you may list events in.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// After the list, print each new Event until interrupted (Ctrl-C).
    #[arg(short, long)]
    pub watch: bool,
    /// Only Events of these types (Normal, Warning); repeat or separate by commas.
    #[arg(long, value_delimiter = ',', value_name = "TYPE")]
    pub types: Vec<String>,
}

#[derive(Debug, Args)]
#[command(
    override_usage = "kubectl tenantflux tree kustomization|helmrelease|resourceset NAME [-n NAMESPACE] [-o table|json|yaml]",
    after_help = "The inventory the controller recorded, recursing into the Kustomizations, HelmReleases and \
                  ResourceSets it applied; Flux objects show their Ready condition.\n\n\
                  Examples:\n  \
                  kubectl tenantflux tree ks flux-system -n flux-system\n  \
                  kubectl tenantflux tree rset tenants -n flux-system -o json"
)]
pub struct TreeArgs {
    /// KIND NAME: ks, hr or rset (or the kind's name) and the object's name.
    #[arg(required = true, num_args = 2, value_names = ["KIND", "NAME"])]
    pub words: Vec<String>,
}

#[derive(Debug, Args)]
#[command(
    override_usage = "kubectl tenantflux trace KIND NAME [-n NAMESPACE]\n       \
                      kubectl tenantflux trace KIND/NAME [-n NAMESPACE]",
    after_help = "KIND is any kind the cluster serves: its name, plural, or group/Kind (apps/Deployment). \
                  Shows the Kustomization, HelmRelease or ResourceSet that applied the object, the one that \
                  applied that one, and so on, each with its revision and Ready, and their sources.\n\n\
                  Examples:\n  \
                  kubectl tenantflux trace deployment podinfo -n apps\n  \
                  kubectl tenantflux trace configmap/settings -n apps -o yaml"
)]
pub struct TraceArgs {
    /// KIND NAME, or KIND/NAME.
    #[arg(required = true, num_args = 1..=2, value_names = ["KIND", "NAME"])]
    pub words: Vec<String>,
}

#[derive(Debug, Args)]
#[command(
    override_usage = "kubectl tenantflux stats [-n NAMESPACE | -A]",
    after_help = "Per kind: how many objects are running (not suspended), failing (Ready=False) and \
                  suspended, and the artifact storage of sources, from the agent's cache.\n\n\
                  Examples:\n  \
                  kubectl tenantflux stats -n flux-system\n  \
                  kubectl tenantflux stats -A -o json"
)]
pub struct StatsArgs {
    /// Count the objects of every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
}

impl TraceArgs {
    /// (kind, name) from `KIND NAME` or `KIND/NAME`.
    pub fn target(&self) -> anyhow::Result<(String, String)> {
        match self.words.as_slice() {
            [kind, name] => Ok((kind.clone(), name.clone())),
            [both] => match both.rsplit_once('/') {
                Some((kind, name)) if !kind.is_empty() && !name.is_empty() => {
                    Ok((kind.to_owned(), name.to_owned()))
                }
                _ => Err(crate::exit::Exit::Usage.mark(anyhow::anyhow!(
                    "trace needs KIND NAME or KIND/NAME, e.g. `trace deployment podinfo`"
                ))),
            },
            _ => unreachable!("clap takes one or two words"),
        }
    }
}
