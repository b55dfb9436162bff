//! The command tree and the dispatch to each command: the one module that knows them all.

use anyhow::Context as _;
use clap::{CommandFactory as _, Parser, Subcommand};

use crate::{
    commands::{
        fleet::{self, FleetCommand},
        instance::{self, InstanceCommand},
        policy::{self, PolicyCommand},
        status, upgrade,
        upgrade::UpgradeCommand,
        version,
        workloads::{self, GetArgs, ReconcileArgs, TargetArgs},
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
    Suspend(TargetArgs),
    /// Let Flux reconcile a suspended object again, and ask for a reconciliation now.
    Resume(TargetArgs),
    /// Ask Flux to reconcile an object now; --wait follows it until its Ready condition
    /// settles.
    Reconcile(ReconcileArgs),
    /// The platform's policy: keygen, sign and verify (local), push and show (the agent).
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// The tenant's FluxInstance: get, and apply or diff a manifest, checked against the
    /// policy.
    #[command(subcommand)]
    Instance(InstanceCommand),
    /// The management side: find the tenant clusters, read every agent's status, push a
    /// signed policy to all of them.
    #[command(subcommand)]
    Fleet(FleetCommand),
    /// Safe Flux upgrades: plan (what breaks), apply (migrate stored versions, bump, follow
    /// until Ready), status.
    #[command(subcommand)]
    Upgrade(UpgradeCommand),
    /// Show the plugin, agent and Flux versions, and whether the flux CLI on PATH matches.
    Version {
        /// Only print the plugin's own version; contacts no cluster.
        #[arg(long)]
        client: bool,
    },
    /// Print the shell completion script of the kubectl-tenantflux binary. `kubectl tenantflux
    /// <TAB>` completes through kubectl_complete-tenantflux on PATH instead.
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
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("failed to start the async runtime")?;
        let options = ConnectOptions::from(&self.global);
        let result = runtime.block_on(async move {
            let done = match self.command {
                Command::Status { watch: false } => status::run(&options, &printer).await,
                Command::Status { watch: true } => status::watch(&options, &printer).await,
                Command::Version { .. } => version::run(&options, &printer).await,
                Command::Get(args) => workloads::get(&options, &printer, args).await,
                Command::Suspend(target) => workloads::suspend(&options, &printer, target).await,
                Command::Resume(target) => workloads::resume(&options, &printer, target).await,
                Command::Reconcile(args) => workloads::reconcile(&options, &printer, args).await,
                Command::Policy(command) => policy::run_remote(command, &options, &printer).await,
                Command::Instance(command) => {
                    return instance::run(command, &options, &printer).await;
                }
                Command::Fleet(command) => fleet::run(command, &options, &printer).await,
                Command::Upgrade(command) => upgrade::run(command, &options, &printer).await,
                Command::Completion { .. } => unreachable!("answered before connecting"),
            };
            done.map(|()| Exit::Success)
        });
        runtime.block_on(crate::connect::delete_identity_csrs());
        crate::timings::print(started);
        result
    }
}

fn top_level_help() -> String {
    format!(
        "Examples:\n  \
         kubectl tenantflux status\n  \
         kubectl tenantflux get ks -A\n  \
         kubectl tenantflux reconcile ks apps -n flux-system --with-source --wait\n  \
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
}
