//! The command tree and the dispatch to each command: the one module that knows them all.

use anyhow::Context as _;
use clap::{CommandFactory as _, Parser, Subcommand};

use crate::{
    commands::{
        adopt::{self, AdoptCommand},
        dashboard::{self, DashboardArgs},
        fleet::{self, FleetCommand},
        flux::{self, FluxArgs},
        inspect::{self, EventsArgs, StatsArgs, TraceArgs, TreeArgs},
        instance::{self, InstanceCommand},
        logs::{self, LogsArgs},
        operator::{self, OperatorCommand},
        policy::{self, PolicyCommand},
        status, upgrade,
        upgrade::UpgradeCommand,
        version,
        workloads::{self, ControlArgs, GetArgs, ReconcileArgs},
    },
    complete,
    connect::ConnectOptions,
    context::GlobalArgs,
    exit::Exit,
};

#[derive(Debug, Parser)]
#[command(
    name = "kubectl-tenantflux",
    bin_name = "kubectl tenantflux",
    version,
    about = "Tenant-owned Flux: status, control and safe upgrades through tenantflux-agent",
    after_help = top_level_help()
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show the agent, flux-operator, FluxInstance and policy state of the cluster.
    #[command(
        after_help = "Examples:\n  kubectl tenantflux status\n  kubectl tenantflux status -o json\n  kubectl tenantflux status --watch"
    )]
    Status {
        /// After the status, print it again at every change, until interrupted (Ctrl-C);
        /// reconnects when the connection to the agent is lost.
        #[arg(short, long)]
        watch: bool,
    },
    /// List Flux objects of one kind, or of every kind (`all`), as `flux get` does, at the API
    /// version the cluster serves.
    Get(GetArgs),
    /// Stop Flux from reconciling an object (spec.suspend; the FluxInstance's reconcile
    /// annotation).
    #[command(after_help = workloads::control_help(&["suspend ks apps -n flux-system", "suspend source git podinfo", "suspend hr podinfo", "suspend ks --all -n apps"]))]
    Suspend(ControlArgs),
    /// Let Flux reconcile a suspended object again, and ask for a reconciliation now.
    #[command(after_help = workloads::control_help(&["resume ks apps -n flux-system", "resume source git podinfo", "resume ks --all -A"]))]
    Resume(ControlArgs),
    /// Ask Flux to reconcile an object now and wait until its Ready condition settles for
    /// that request (--wait=false only asks).
    #[command(after_help = workloads::control_help(&["reconcile ks apps -n flux-system", "reconcile ks apps --with-source", "reconcile hr podinfo --force --timeout 10m", "reconcile ks apps --wait=false"]))]
    Reconcile(ReconcileArgs),
    /// The Kubernetes Events of Flux objects, oldest first, as `flux events` shows them.
    Events(EventsArgs),
    /// The inventory of a Kustomization, HelmRelease or ResourceSet as a tree, recursing into
    /// the ones it applied, with Ready for Flux objects.
    Tree(TreeArgs),
    /// Which Kustomization, HelmRelease or ResourceSet applied an object, up to its source,
    /// with each one's revision and Ready.
    Trace(TraceArgs),
    /// Per kind: how many Flux objects run, fail and are suspended, and sources' storage.
    Stats(StatsArgs),
    /// The Flux controllers' log lines about the Flux objects you may get, read by the agent,
    /// as `flux logs` prints them.
    Logs(LogsArgs),
    /// Serve a live web page of the cluster's Flux on 127.0.0.1 (objects, inventories, Events,
    /// the cluster's state; suspend, resume, reconcile), through the agent as you.
    #[command(
        after_help = "The page shows what your credentials may watch: every namespace, or with -n one. It\nlistens on 127.0.0.1 only, under a name of its own per run (NAME.localhost); the printed\naddress signs one browser in, once; a session ends after 30 min idle or 12 h. Ctrl-C stops it.\n\nExamples:\n  kubectl tenantflux dashboard\n  kubectl tenantflux dashboard -n apps --port 8900 --no-open"
    )]
    Dashboard(DashboardArgs),
    /// The platform's policy: keygen, sign and verify (local), push and show (the agent).
    #[command(subcommand)]
    #[command(
        after_help = "Examples:\n  kubectl tenantflux policy keygen --out ./keys\n  kubectl tenantflux policy sign -f policy.yaml --key keys/ed25519.key --out policy.signed.yaml\n  kubectl tenantflux policy push -f policy.signed.yaml\n  kubectl tenantflux policy show"
    )]
    Policy(PolicyCommand),
    /// The tenant's FluxInstance: get, and apply or diff a manifest, checked against the
    /// policy.
    #[command(subcommand)]
    #[command(
        after_help = "Examples:\n  kubectl tenantflux instance get\n  kubectl tenantflux instance diff -f flux-instance.yaml\n  kubectl tenantflux instance apply -f flux-instance.yaml"
    )]
    Instance(InstanceCommand),
    /// The management side: find the tenant clusters, read every agent's status, push a
    /// signed policy to all of them.
    #[command(subcommand)]
    #[command(
        after_help = "Examples:\n  kubectl tenantflux fleet list\n  kubectl tenantflux fleet status\n  kubectl tenantflux fleet policy push -f policy.signed.yaml --all"
    )]
    Fleet(FleetCommand),
    /// Safe Flux upgrades: plan (what breaks), apply (migrate stored versions, bump, follow
    /// until Ready), status.
    #[command(subcommand)]
    #[command(
        after_help = "Examples:\n  kubectl tenantflux upgrade plan --to 2.9.x\n  kubectl tenantflux upgrade apply --to 2.9.x\n  kubectl tenantflux upgrade status --wait"
    )]
    Upgrade(UpgradeCommand),
    /// Take over the Flux that runs already (an orphaned Helm install of flux-operator, or
    /// `flux install`): plan (what runs, what changes), apply (without restarting Flux).
    #[command(subcommand)]
    #[command(
        after_help = "Examples:\n  kubectl tenantflux adopt plan\n  kubectl tenantflux adopt apply"
    )]
    Adopt(AdoptCommand),
    /// flux-operator releases the agents' build does not know: review one, and vouch for it in
    /// the platform's policy so every agent may install it.
    #[command(subcommand)]
    #[command(
        after_help = "Examples:\n  kubectl tenantflux operator review oci://ghcr.io/controlplaneio-fluxcd/flux-operator-manifests:v0.61.0\n  kubectl tenantflux operator vouch oci://ghcr.io/controlplaneio-fluxcd/flux-operator-manifests:v0.61.0 -f policy.yaml --out policy.yaml"
    )]
    Operator(OperatorCommand),
    /// Run the flux CLI of exactly the Flux release the cluster runs (downloaded, verified and
    /// cached on first use), with your kubeconfig, context and namespace.
    #[command(after_help = flux::help())]
    Flux(FluxArgs),
    /// Show the plugin, agent and Flux versions, and whether the flux CLI on PATH matches.
    #[command(
        after_help = "Examples:\n  kubectl tenantflux version\n  kubectl tenantflux version --client\n  kubectl tenantflux version -o json"
    )]
    Version {
        /// Only print the plugin's own version; contacts no cluster.
        #[arg(long)]
        client: bool,
    },
    /// Print the shell completion script of the kubectl-tenantflux binary. `kubectl tenantflux
    /// <TAB>` completes through kubectl_complete-tenantflux on PATH instead.
    #[command(
        after_help = "Examples:\n  kubectl tenantflux completion bash > ~/.local/share/bash-completion/completions/kubectl-tenantflux\n  kubectl tenantflux completion zsh > \"${fpath[1]}/_kubectl-tenantflux\""
    )]
    Completion {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

impl Cli {
    pub fn run(self) -> anyhow::Result<Exit> {
        let started = std::time::Instant::now();
        let printer = self.global.printer();
        // Answered before any runtime or client exists: `version --client` must start fast.
        if let Command::Version { client: true } = self.command {
            return version::print_client(&printer).map(|()| Exit::Success);
        }
        if let Command::Policy(command) = &self.command
            && let Some(done) = policy::run_local(command, &printer)
        {
            return done.map(|()| Exit::Success);
        }
        if let Command::Completion { shell } = self.command {
            complete::print_script(Self::command(), shell, &mut std::io::stdout().lock())?;
            return Ok(Exit::Success);
        }
        // Several crates enable rustls; naming the provider avoids an ambiguous process default.
        let _ = rustls::crypto::ring::default_provider().install_default();
        // Runs flux in place of this process once the binary is known: no runtime of ours.
        let command = match self.command {
            Command::Flux(args) => return flux::run(&self.global, args),
            command => command,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("failed to start the async runtime")?;
        let options = ConnectOptions::from(&self.global);
        let result = runtime.block_on(async move {
            let done = match command {
                Command::Status { watch: false } => status::run(&options, &printer).await,
                Command::Status { watch: true } => status::watch(&options, &printer).await,
                Command::Version { .. } => version::run(&options, &printer).await,
                Command::Get(args) => workloads::get(&options, &printer, args).await,
                Command::Suspend(target) => workloads::suspend(&options, &printer, target).await,
                Command::Resume(target) => workloads::resume(&options, &printer, target).await,
                Command::Reconcile(args) => workloads::reconcile(&options, &printer, args).await,
                Command::Events(args) => inspect::events(&options, &printer, args).await,
                Command::Tree(args) => inspect::tree(&options, &printer, args).await,
                Command::Trace(args) => inspect::trace(&options, &printer, args).await,
                Command::Stats(args) => inspect::stats(&options, &printer, args).await,
                Command::Logs(args) => logs::run(&options, &printer, args).await,
                Command::Dashboard(args) => dashboard::run(&options, args).await,
                Command::Policy(command) => policy::run_remote(command, &options, &printer).await,
                Command::Instance(command) => {
                    return instance::run(command, &options, &printer).await;
                }
                Command::Fleet(command) => fleet::run(command, &options, &printer).await,
                Command::Upgrade(command) => upgrade::run(command, &options, &printer).await,
                Command::Adopt(command) => adopt::run(command, &options, &printer).await,
                Command::Operator(command) => operator::run(command, &printer).await,
                Command::Completion { .. } => unreachable!("answered before connecting"),
                Command::Flux(_) => unreachable!("run before the runtime starts"),
            };
            done.map(|()| Exit::Success)
        });
        crate::timings::print(started);
        result
    }
}

fn top_level_help() -> String {
    format!(
        "Examples:\n  \
         kubectl tenantflux status\n  \
         kubectl tenantflux get ks -A\n  \
         kubectl tenantflux reconcile ks apps -n flux-system --with-source\n  \
         kubectl tenantflux upgrade plan --to 2.9.x\n\n{}",
        Exit::help()
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::output::{ColorMode, OutputFormat};

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("kubectl-tenantflux").chain(args.iter().copied()))
            .expect("arguments parse")
    }

    /// The value a flag takes when absent: its env twin if the test's environment sets it.
    fn env_or(var: &str, default: &str) -> String {
        std::env::var(var).unwrap_or_else(|_| default.to_owned())
    }

    #[test]
    fn defaults() {
        let cli = parse(&["status"]);
        assert!(matches!(cli.command, Command::Status { watch: false }));
        let g = cli.global;
        assert_eq!(
            g.agent_namespace,
            env_or("TENANTFLUX_AGENT_NAMESPACE", "tenantflux-system")
        );
        assert_eq!(
            g.agent_audience,
            env_or("TENANTFLUX_AGENT_AUDIENCE", "tenantflux-agent")
        );
        assert_eq!(g.output, OutputFormat::Table);
        assert_eq!(g.color, ColorMode::Auto);
        assert_eq!(g.request_timeout.get(), Some(Duration::from_secs(30)));
        assert_eq!(g.context, None);
        assert_eq!(g.namespace, None);
    }

    #[test]
    fn every_tenantflux_flag_has_its_env_twin() {
        let cmd = Cli::command();
        let env_of = |id: &str| {
            cmd.get_arguments()
                .find(|a| a.get_id() == id)
                .and_then(|a| a.get_env())
                .map(|e| e.to_string_lossy().into_owned())
        };
        assert_eq!(env_of("kubeconfig").as_deref(), Some("KUBECONFIG"));
        assert_eq!(
            env_of("agent_namespace").as_deref(),
            Some("TENANTFLUX_AGENT_NAMESPACE")
        );
        assert_eq!(
            env_of("agent_address").as_deref(),
            Some("TENANTFLUX_AGENT_ADDRESS")
        );
        assert_eq!(
            env_of("agent_audience").as_deref(),
            Some("TENANTFLUX_AGENT_AUDIENCE")
        );
        assert_eq!(env_of("token").as_deref(), Some("TENANTFLUX_TOKEN"));
    }

    #[test]
    fn token_env_value_is_hidden_from_help() {
        let cmd = Cli::command();
        let token = cmd
            .get_arguments()
            .find(|a| a.get_id() == "token")
            .expect("token flag");
        assert!(token.is_hide_env_values_set());
    }

    #[test]
    fn reconcile_waits_unless_told_not_to() {
        let wait = |args: &[&str]| match parse(args).command {
            Command::Reconcile(args) => args.wait,
            other => panic!("{other:?}"),
        };
        assert!(wait(&["reconcile", "ks", "apps"]));
        assert!(wait(&["reconcile", "ks", "apps", "--wait"]));
        assert!(wait(&["reconcile", "--wait", "ks", "apps"]));
        assert!(!wait(&["reconcile", "ks", "apps", "--wait=false"]));
    }

    #[test]
    fn the_inspect_commands_parse_their_words() {
        match parse(&["events", "ks", "apps", "--types", "Warning,Normal", "-w"]).command {
            Command::Events(args) => {
                assert_eq!(args.words, ["ks", "apps"]);
                assert_eq!(args.types, ["Warning", "Normal"]);
                assert!(args.watch);
            }
            other => panic!("{other:?}"),
        }
        match parse(&["trace", "apps/Deployment/podinfo"]).command {
            Command::Trace(args) => assert_eq!(
                args.target().unwrap(),
                ("apps/Deployment".to_owned(), "podinfo".to_owned())
            ),
            other => panic!("{other:?}"),
        }
        assert!(Cli::try_parse_from(["kubectl-tenantflux", "tree", "ks"]).is_err());
        assert!(matches!(
            parse(&["stats", "-A"]).command,
            Command::Stats(StatsArgs {
                all_namespaces: true
            })
        ));
    }

    #[test]
    fn global_flags_work_after_the_subcommand() {
        let cli = parse(&[
            "version",
            "--client",
            "-o",
            "json",
            "-n",
            "apps",
            "--context",
            "tenant-a",
            "--agent-namespace",
            "tf",
            "--agent-address",
            "http://127.0.0.1:9090",
            "--color",
            "never",
            "--request-timeout",
            "5s",
        ]);
        assert!(matches!(cli.command, Command::Version { client: true }));
        let g = cli.global;
        assert_eq!(g.output, OutputFormat::Json);
        assert_eq!(g.namespace.as_deref(), Some("apps"));
        assert_eq!(g.context.as_deref(), Some("tenant-a"));
        assert_eq!(g.agent_namespace, "tf");
        assert_eq!(
            g.agent_address.map(|u| u.to_string()).as_deref(),
            Some("http://127.0.0.1:9090/")
        );
        assert_eq!(g.color, ColorMode::Never);
        assert_eq!(g.request_timeout.get(), Some(Duration::from_secs(5)));
    }

    #[test]
    fn status_watches_with_w_or_watch() {
        for flag in ["-w", "--watch"] {
            assert!(matches!(
                parse(&["status", flag, "-o", "json"]).command,
                Command::Status { watch: true }
            ));
        }
    }

    #[test]
    fn version_without_client_asks_the_agent() {
        assert!(matches!(
            parse(&["version"]).command,
            Command::Version { client: false }
        ));
    }

    #[test]
    fn rejects_bad_values() {
        let bad = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("kubectl-tenantflux").chain(args.iter().copied()))
                .is_err()
        };
        assert!(bad(&["status", "-o", "wide"]));
        assert!(bad(&["status", "--color", "sometimes"]));
        assert!(bad(&["status", "--agent-address", "127.0.0.1:9090"]));
        assert!(bad(&[
            "status",
            "--agent-address",
            "https://127.0.0.1:9090"
        ]));
        assert!(bad(&["status", "--request-timeout", "5 parsecs"]));
        assert!(bad(&[]));
    }

    #[test]
    fn every_command_shows_examples_in_its_help() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
                let path = format!("{path} {}", sub.get_name());
                let help = sub
                    .get_after_help()
                    .map(|h| h.to_string())
                    .unwrap_or_default();
                if !help.contains("Examples:\n  kubectl tenantflux ")
                    && !help.contains("Examples:\n  KUBE_EDITOR")
                {
                    missing.push(path.clone());
                }
                walk(sub, &path, missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "kubectl tenantflux", &mut missing);
        assert!(
            missing.is_empty(),
            "no Examples: in the help of {missing:?}"
        );
    }

    #[test]
    fn the_top_level_help_lists_the_exit_codes() {
        let help = Cli::command().render_long_help().to_string();
        assert!(help.contains(&Exit::help()), "{help}");
        assert!(help.contains("Examples:"), "{help}");
    }

    #[test]
    fn a_usage_error_exits_with_the_usage_code() {
        let err = Cli::try_parse_from(["kubectl-tenantflux", "status", "--no-such-flag"])
            .expect_err("an unknown flag");
        assert_eq!(err.exit_code(), i32::from(Exit::Usage.code()));
    }

    #[test]
    fn the_test_only_agent_address_is_hidden_but_works() {
        let help = Cli::command().render_long_help().to_string();
        assert!(!help.contains("--agent-address"), "{help}");
        let cli = parse(&["status", "--agent-address", "http://127.0.0.1:9090"]);
        assert!(cli.global.agent_address.is_some());
    }

    #[test]
    fn no_headers_is_kubectls_spelling_of_no_header() {
        for flag in ["--no-header", "--no-headers"] {
            let Command::Get(args) = parse(&["get", "ks", flag]).command else {
                panic!("get");
            };
            assert!(args.no_header, "{flag}");
        }
    }
}
