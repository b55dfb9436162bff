//! The exit codes main returns, for the failures that need no cluster to provoke. The ones that
//! need an agent (refused by policy, upgrade blocked, forbidden) are asserted by the tests in
//! tests/tests against a real control plane.

use std::process::{Command, Output};

fn plugin(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubectl-tenantflux"))
        .args(args)
        // The flags under test only: nothing from the caller's environment.
        .env_remove("TENANTFLUX_AGENT_ADDRESS")
        .env_remove("TENANTFLUX_TOKEN")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .output()
        .expect("run kubectl-tenantflux")
}

fn closed_port() -> String {
    // Bound, then dropped: nothing listens there any more.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("address");
    drop(listener);
    format!("http://{address}")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn an_unreachable_agent_exits_3() {
    let address = closed_port();
    let output = plugin(&["status", "--agent-address", &address, "--token", "t"]);
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("cannot reach"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn usage_errors_exit_2() {
    let unknown_flag = plugin(&["status", "--no-such-flag"]);
    assert_eq!(
        unknown_flag.status.code(),
        Some(2),
        "{}",
        stderr(&unknown_flag)
    );
    let name_across_namespaces = plugin(&["get", "ks", "apps", "-A"]);
    assert_eq!(
        name_across_namespaces.status.code(),
        Some(2),
        "{}",
        stderr(&name_across_namespaces)
    );
}

#[test]
fn other_failures_exit_1_and_success_0() {
    let no_kubeconfig = plugin(&["status"]);
    assert_eq!(
        no_kubeconfig.status.code(),
        Some(1),
        "{}",
        stderr(&no_kubeconfig)
    );
    let client = plugin(&["version", "--client"]);
    assert_eq!(client.status.code(), Some(0), "{}", stderr(&client));
}

#[test]
fn the_help_lists_the_exit_codes() {
    let output = plugin(&["--help"]);
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(help.contains("Exit codes:"), "{help}");
    assert!(help.contains("  3  the agent is unreachable"), "{help}");
}
