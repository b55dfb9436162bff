//! Policy at fleet scale (issue 20) on the real control plane and the real local OCI registry
//! (distribution): signed claims with an expiry (envelope v2; v1 still read), a channel the
//! platform publishes to and the agent pulls from. SECURITY.md lists what each test stands
//! for.

use std::{path::Path, path::PathBuf, time::Duration};

use serde_json::Value;
use tenantflux_tests::{
    TestCluster, json, path, stderr,
    tenant::{compliant_instance, example_without_defaults},
    wait_for,
};

/// The tests share one cluster (and its one agent): one at a time. It is this binary's own
/// ([`TestCluster::own`]): what these tests leave in the agent (a stored policy and the admission
/// policy it enforces, rollback floors, root keys) would refuse other binaries' FluxInstances.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Keys, policies and the platform's account for one test.
struct Platform<'a> {
    cluster: &'a TestCluster,
    dir: tempfile::TempDir,
    key: PathBuf,
    public_key: PathBuf,
    pusher: PathBuf,
}

impl<'a> Platform<'a> {
    /// New keys (the agent is started with [`Self::start_agent`]).
    fn new(cluster: &'a TestCluster) -> Self {
        cluster.ensure_flux_operator().expect("flux-operator");
        let dir = tempfile::tempdir().unwrap();
        let keys = dir.path().join("keys");
        let out = cluster
            .kubectl_tenantflux(None, &["policy", "keygen", "--out", path(&keys)])
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let public_key = keys.join("ed25519.pub");
        Self {
            cluster,
            key: keys.join("ed25519.key"),
            public_key,
            pusher: cluster
                .policy_pusher_kubeconfig()
                .expect("platform account"),
            dir,
        }
    }

    /// (Re)starts the agent with the public key and `env`.
    fn start_agent(&self, env: &[(&str, &str)]) {
        let mut all = vec![("TENANTFLUX_POLICY_PUBLIC_KEY", path(&self.public_key))];
        all.extend_from_slice(env);
        self.cluster.restart_agent_with(&all).expect("agent");
    }

    fn plugin(&self, kubeconfig: Option<&Path>, args: &[&str]) -> std::process::Output {
        self.cluster
            .kubectl_tenantflux(kubeconfig, args)
            .unwrap_or_else(|err| panic!("kubectl tenantflux {args:?}: {err}"))
    }

    /// A fleet file of one cluster, this one, as `c1`.
    fn fleet_file(&self) -> PathBuf {
        let file = self.dir.path().join("fleet.yaml");
        let entry = format!(
            "- {{name: c1, kubeconfig: {}}}\n",
            self.cluster.kubeconfig().display()
        );
        std::fs::write(&file, entry).unwrap();
        file
    }

    fn ok(&self, args: &[&str]) -> Value {
        let out = self.plugin(None, args);
        assert!(out.status.success(), "{args:?}: {out:?}");
        json(&out)
    }

    /// The example policy (without defaults) at `generation`, signed with `extra` flags.
    fn sign(&self, generation: u64, extra: &[&str]) -> PathBuf {
        let unsigned = self.dir.path().join(format!("policy-{generation}.yaml"));
        std::fs::write(
            &unsigned,
            example_without_defaults()
                .replace("generation: 7", &format!("generation: {generation}")),
        )
        .unwrap();
        let signed = self.dir.path().join(format!("signed-{generation}.yaml"));
        let mut args = vec![
            "policy",
            "sign",
            "-f",
            path(&unsigned),
            "--key",
            path(&self.key),
            "--out",
            path(&signed),
        ];
        args.extend_from_slice(extra);
        let out = self.plugin(None, &args);
        assert!(out.status.success(), "{out:?}");
        signed
    }

    fn push(&self, signed: &Path) -> std::process::Output {
        self.plugin(Some(&self.pusher), &["policy", "push", "-f", path(signed)])
    }

    fn show(&self) -> Value {
        self.ok(&["policy", "show", "-o", "json"])
    }

    fn verify(&self, signed: &Path) -> Value {
        self.ok(&[
            "policy",
            "verify",
            "-f",
            path(signed),
            "--public-key",
            path(&self.public_key),
            "-o",
            "json",
        ])
    }
}

/// Whether the API server refuses a FluxInstance with an unallowed registry (server-side dry
/// run: nothing is stored).
fn refuses_non_compliant(cluster: &TestCluster) -> bool {
    let mut instance = compliant_instance();
    instance["spec"]["distribution"]["registry"] = "docker.io/evil".into();
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), instance.to_string()).unwrap();
    let output = cluster
        .kubectl(&["apply", "--dry-run=server", "-f", path(file.path())])
        .unwrap();
    !output.status.success() && String::from_utf8_lossy(&output.stderr).contains("denied request")
}

/// A policy past its signed expiry stays in force (fail-static) and is reported stale in
/// `policy show`, `status`, the metrics and `fleet status`; an already expired policy is not
/// taken; a v1 envelope (no claims) is still accepted and never stale.
#[tokio::test]
async fn an_expired_policy_is_reported_stale_and_still_enforced() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let cluster = TestCluster::own("policy-pull");
    let platform = Platform::new(cluster);
    platform.start_agent(&[]);

    let short = platform.sign(1, &["--expires-in", "20s"]);
    let verified = platform.verify(&short);
    assert_eq!(verified["stale"], false, "{verified:#}");
    let out = platform.push(&short);
    assert!(out.status.success(), "{out:?}");
    let shown = platform.show();
    assert_eq!(shown["generation"], 1, "{shown:#}");
    assert_eq!(shown["stale"], false, "{shown:#}");
    let expires_at = shown["expiresAt"].as_str().expect("expiresAt").to_owned();
    assert_eq!(verified["expiresAt"], expires_at.as_str());
    wait_for("the admission policy", Duration::from_secs(30), || {
        let refused = refuses_non_compliant(cluster);
        async move { refused.then_some(()) }
    })
    .await
    .expect("enforced");

    // The expiry passes with nothing newer: stale, reported, still enforced.
    let problem = format!(
        "policy \"platform\" generation 1 is stale: it expired at {expires_at} and no newer policy has been verified; the agent keeps enforcing it"
    );
    let shown = wait_for("the policy reported stale", Duration::from_secs(60), || {
        let shown = platform.show();
        let reported = shown["problems"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p == problem.as_str()));
        async move { reported.then_some(shown) }
    })
    .await
    .expect("stale");
    assert_eq!(shown["stale"], true, "{shown:#}");
    let status = platform.ok(&["status", "-o", "json"]);
    assert_eq!(status["policy"]["stale"], true, "{status:#}");
    assert_eq!(status["policy"]["generation"], 1, "{status:#}");
    assert_eq!(status["agent"]["health"], "degraded", "{status:#}");
    let text = cluster.agent_metrics();
    assert!(text.contains("tenantflux_agent_policy_stale 1"), "{text}");
    assert!(
        text.contains("tenantflux_agent_policy_generation 1"),
        "{text}"
    );
    assert!(refuses_non_compliant(cluster), "still enforced");

    let fleet_file = platform.fleet_file();
    let fleet = platform.ok(&[
        "fleet",
        "status",
        "--fleet-file",
        path(&fleet_file),
        "-o",
        "json",
    ]);
    let row = &fleet["clusters"][0];
    assert_eq!(row["policyStale"], true, "{row:#}");
    assert_eq!(row["policyExpiresAt"], expires_at.as_str(), "{row:#}");
    let table = platform.plugin(
        None,
        &["fleet", "status", "--fleet-file", path(&fleet_file)],
    );
    let table = String::from_utf8_lossy(&table.stdout).into_owned();
    assert!(table.contains("1 (stale)"), "{table}");

    // A policy that has already expired is refused; the stale one stays.
    let expired = platform.sign(2, &["--expires-in", "1s"]);
    wait_for("generation 2 to expire", Duration::from_secs(10), || {
        let verified = platform.verify(&expired);
        async move { (verified["stale"] == true).then_some(()) }
    })
    .await
    .expect("expired");
    let out = platform.push(&expired);
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    let err = stderr(&out);
    assert!(
        err.contains("policy \"platform\" generation 2 expired at")
            && err.contains("sign it again with a later expiry"),
        "{err}"
    );
    assert_eq!(platform.show()["generation"], 1);

    // v1 envelopes are still read: no claims, never stale; a new policy clears the report.
    let v1 = platform.sign(3, &["--envelope", "v1"]);
    let text = std::fs::read_to_string(&v1).unwrap();
    assert!(
        text.contains("apiVersion: tenantflux.io/v1alpha1") && !text.contains("claims"),
        "{text}"
    );
    let out = platform.push(&v1);
    assert!(out.status.success(), "{out:?}");
    let shown = platform.show();
    assert_eq!(shown["generation"], 3, "{shown:#}");
    assert_eq!(shown["stale"], false, "{shown:#}");
    assert!(shown.get("expiresAt").is_none(), "{shown:#}");
    assert_eq!(shown["problems"], serde_json::json!([]), "{shown:#}");
    let status = platform.ok(&["status", "-o", "json"]);
    assert_eq!(status["policy"]["stale"], false, "{status:#}");
}

fn policy_problems(shown: &Value) -> Vec<String> {
    shown["problems"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p.as_str().map(str::to_owned))
        .collect()
}

/// Waits until `policy show` satisfies `check`; returns what it showed.
async fn wait_shown(platform: &Platform<'_>, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    let found = wait_for(what, Duration::from_secs(60), || {
        let shown = platform.show();
        let ok = check(&shown);
        last = shown.clone();
        async move { ok.then_some(shown) }
    })
    .await;
    found.unwrap_or_else(|err| panic!("{err}; policy show: {last:#}"))
}

/// The platform publishes to a channel once; the agent (checking every second) takes each new
/// generation as a push would. An older artifact tagged over the channel is refused and
/// reported; a registry that stops answering changes nothing and is reported with the time it
/// stopped; pushes still work meanwhile, and the channel is followed again once it answers.
#[tokio::test]
async fn the_agent_pulls_the_channel_refuses_a_rollback_and_survives_the_registry() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let cluster = TestCluster::own("policy-pull");
    let registry = cluster.registry().expect("registry");
    let channel = format!("oci://{registry}/pull-{}/policy:stable", std::process::id());
    let platform = Platform::new(cluster);
    let publish = |signed: &Path| {
        let out = platform.plugin(
            None,
            &[
                "policy",
                "publish",
                "-f",
                path(signed),
                &channel,
                "--plain-http",
                "--public-key",
                path(&platform.public_key),
                "-o",
                "json",
            ],
        );
        assert!(out.status.success(), "publish: {out:?}");
        json(&out)["digest"].as_str().expect("digest").to_owned()
    };
    let gen1 = platform.sign(1, &[]);
    let digest1 = publish(&gen1);
    assert!(digest1.starts_with("sha256:"), "{digest1}");
    platform.start_agent(&[
        ("TENANTFLUX_POLICY_SOURCE", &channel),
        ("TENANTFLUX_POLICY_SOURCE_INTERVAL", "1s"),
        ("TENANTFLUX_POLICY_SOURCE_PLAIN_HTTP", "true"),
    ]);
    let shown = wait_shown(&platform, "generation 1 pulled", |s| s["generation"] == 1).await;
    assert_eq!(shown["source"]["channel"], channel.as_str(), "{shown:#}");
    assert_eq!(shown["source"]["digest"], digest1.as_str(), "{shown:#}");
    assert!(policy_problems(&shown).is_empty(), "{shown:#}");

    // A new generation: every check is a HEAD; the change is fetched by digest and applied.
    let gen2 = platform.sign(2, &[]);
    let published = std::time::Instant::now();
    let digest2 = publish(&gen2);
    let shown = wait_shown(&platform, "generation 2 pulled", |s| s["generation"] == 2).await;
    assert_eq!(shown["source"]["digest"], digest2.as_str(), "{shown:#}");
    eprintln!(
        "generation 2 held {:?} after publishing (interval 1s)",
        published.elapsed()
    );
    let record = cluster
        .kubectl_ok(&[
            "-n",
            "tenantflux-system",
            "get",
            "configmap",
            "tenantflux-policy-highest",
            "-o",
            "jsonpath={.data.signed-policy\\.yaml}",
        ])
        .unwrap();
    assert_eq!(record, std::fs::read_to_string(&gen2).unwrap());

    // The attack: whoever can push to the tag puts the older, validly signed artifact back.
    let retagged = publish(&gen1);
    assert_eq!(retagged, digest1, "the same artifact, byte for byte");
    let shown = wait_shown(&platform, "the rollback reported", |s| {
        policy_problems(s).iter().any(|p| p.contains("is refused"))
    })
    .await;
    let problems = policy_problems(&shown);
    assert!(
        problems.iter().any(|p| p.contains(&format!(
            "the policy at {channel} ({digest1}) is refused: stale generation 1 ≤ 2"
        )) && p.contains("an older policy was tagged over the channel")),
        "{problems:#?}"
    );
    assert_eq!(shown["generation"], 2, "{shown:#}");
    let again = cluster
        .kubectl_ok(&[
            "-n",
            "tenantflux-system",
            "get",
            "configmap",
            "tenantflux-policy-highest",
            "-o",
            "jsonpath={.data.signed-policy\\.yaml}",
        ])
        .unwrap();
    assert_eq!(again, record, "the record is unchanged");
    let status = platform.ok(&["status", "-o", "json"]);
    assert_eq!(status["agent"]["health"], "degraded", "{status:#}");

    // The platform moves the channel on: generation 3 is taken, the report is over.
    let gen3 = platform.sign(3, &[]);
    publish(&gen3);
    let shown = wait_shown(&platform, "generation 3 pulled", |s| s["generation"] == 3).await;
    assert!(policy_problems(&shown).is_empty(), "{shown:#}");

    // The registry stops: nothing changes, and the source is reported as not answering.
    cluster.stop_registry().expect("stopping the registry");
    let shown = wait_shown(&platform, "the outage reported", |s| {
        s["source"]["unansweredSince"].is_string()
    })
    .await;
    let since = shown["source"]["unansweredSince"]
        .as_str()
        .unwrap()
        .to_owned();
    let shown = wait_shown(&platform, "the outage in the problems", |s| {
        policy_problems(s)
            .iter()
            .any(|p| p.starts_with(&format!("policy source {channel} has not answered since ")))
    })
    .await;
    assert_eq!(shown["generation"], 3, "{shown:#}");
    assert!(refuses_non_compliant(cluster), "still enforced");

    // A push still works while the registry is down.
    let gen4 = platform.sign(4, &[]);
    let out = platform.push(&gen4);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(platform.show()["generation"], 4);

    // The registry comes back (same port, same storage): the outage is over, and the channel's
    // generation 3, lower than the pushed 4, is not taken.
    cluster.registry().expect("registry again");
    let shown = wait_shown(&platform, "the source answering again", |s| {
        s["source"]
            .get("unansweredSince")
            .is_none_or(Value::is_null)
            && !policy_problems(s)
                .iter()
                .any(|p| p.contains("has not answered since"))
    })
    .await;
    assert_eq!(shown["generation"], 4, "{shown:#}");
    eprintln!("the registry did not answer from {since}");

    // The platform's view: the channel read once, the cluster marked against it.
    let fleet_file = platform.fleet_file();
    let fleet_of = |channel: &str| {
        platform.plugin(
            None,
            &[
                "fleet",
                "status",
                "--fleet-file",
                path(&fleet_file),
                "--channel",
                channel,
                "--public-key",
                path(&platform.public_key),
                "--plain-http",
                "-o",
                "json",
            ],
        )
    };
    let fleet = |channel: &str| {
        let out = fleet_of(channel);
        (
            out.status.code(),
            json(&out)["clusters"][0]["channel"].clone(),
        )
    };
    assert_eq!(fleet(&channel), (Some(0), Value::from("ahead (1)")));
    let other = channel.replace(":stable", ":next");
    let out = platform.plugin(
        None,
        &[
            "policy",
            "publish",
            "-f",
            path(&platform.sign(9, &[])),
            &other,
            "--plain-http",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    // A channel the agent does not follow: the cluster is behind it, and the exit code says so.
    assert_eq!(fleet(&other), (Some(1), Value::from("behind (5)")));
    // Whoever can push to a tag can put any envelope there: one the platform's key did not
    // sign (a key of the attacker's own, then a copy whose signature is mangled) is named as
    // forged, nothing is compared, exit 1.
    let forger = platform.dir.path().join("forger");
    let out = platform.plugin(None, &["policy", "keygen", "--out", path(&forger)]);
    assert!(out.status.success(), "{out:?}");
    let unsigned = platform.dir.path().join("policy-forged.yaml");
    std::fs::write(
        &unsigned,
        example_without_defaults().replace("generation: 7", "generation: 99"),
    )
    .unwrap();
    let forged = platform.dir.path().join("forged.yaml");
    let out = platform.plugin(
        None,
        &[
            "policy",
            "sign",
            "-f",
            path(&unsigned),
            "--key",
            path(&forger.join("ed25519.key")),
            "--out",
            path(&forged),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let mangled = platform.dir.path().join("mangled.yaml");
    let genuine = std::fs::read_to_string(platform.sign(98, &[])).unwrap();
    let signature = genuine
        .lines()
        .find_map(|l| l.strip_prefix("signature: "))
        .expect("a signature line")
        .to_owned();
    let flipped: String = signature
        .chars()
        .enumerate()
        .map(|(i, c)| {
            if i == 5 {
                if c == 'A' { 'B' } else { 'A' }
            } else {
                c
            }
        })
        .collect();
    std::fs::write(&mangled, genuine.replace(&signature, &flipped)).unwrap();
    for (file, tag, says) in [
        (&forged, ":forged", "which is none of --public-key"),
        (&mangled, ":mangled", "does not verify: a forged channel"),
    ] {
        let tagged = channel.replace(":stable", tag);
        let out = platform.plugin(
            None,
            &[
                "policy",
                "publish",
                "-f",
                path(file),
                &tagged,
                "--plain-http",
            ],
        );
        assert!(out.status.success(), "{out:?}");
        let out = fleet_of(&tagged);
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(says), "{stderr}");
        assert!(out.stdout.is_empty(), "nothing compared: {out:?}");
    }
    publish(&platform.sign(6, &[]));
    wait_shown(&platform, "generation 6 pulled", |s| s["generation"] == 6).await;
    assert_eq!(fleet(&channel), (Some(0), Value::from("current")));
}

/// Keys rotate and revoke without restarting the agent: installed with a root key only, it
/// takes the keyring published beside the channel (`TAG-keyring`), then the policy signed by
/// a key the keyring names. A policy by an unknown key, by a revoked key, or for another
/// cluster is refused; an older keyring and one not signed by the root are refused; the
/// keyring version never goes back.
#[tokio::test]
async fn keys_rotate_and_revoke_without_restarting_the_agent() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let cluster = TestCluster::own("policy-pull");
    let registry = cluster.registry().expect("registry");
    let channel = format!("oci://{registry}/keys-{}/policy:stable", std::process::id());
    let platform = Platform::new(cluster);
    let dir = platform.dir.path();
    let keygen = |name: &str, root: bool| {
        let out_dir = dir.join(name);
        let mut args = vec!["policy", "keygen", "--out", path(&out_dir), "-o", "json"];
        if root {
            args.push("--root");
        }
        let id = platform.ok(&args)["keyId"].as_str().unwrap().to_owned();
        (out_dir, id)
    };
    let (root_dir, _) = keygen("root", true);
    let root_key = root_dir.join("root.key");
    let (k2_dir, k2_id) = keygen("k2", false);
    let k1_pub = platform.public_key.clone();
    let k1_id = platform.ok(&[
        "policy",
        "verify",
        "-f",
        path(&platform.sign(1, &[])),
        "--public-key",
        path(&k1_pub),
        "-o",
        "json",
    ])["keyId"]
        .as_str()
        .unwrap()
        .to_owned();
    let keyring = |version: u64, keys: &[&Path], revoke: &[&str], root: &Path| {
        let out = dir.join(format!("keyring-{version}-{}.yaml", keys.len()));
        let version = version.to_string();
        let mut args = vec![
            "policy",
            "keyring",
            "sign",
            "--version",
            &version,
            "--root-key",
            path(root),
            "--out",
            path(&out),
        ];
        for key in keys {
            args.extend(["--key", path(key)]);
        }
        for id in revoke {
            args.extend(["--revoke", id]);
        }
        let done = platform.plugin(None, &args);
        assert!(done.status.success(), "{done:?}");
        out
    };
    let publish = |args: &[&str]| {
        let out = platform.plugin(None, args);
        assert!(out.status.success(), "{args:?}: {out:?}");
    };
    let publish_keyring = |file: &Path| {
        publish(&[
            "policy",
            "keyring",
            "publish",
            "-f",
            path(file),
            &channel,
            "--plain-http",
        ])
    };
    let publish_policy = |file: &Path| {
        publish(&[
            "policy",
            "publish",
            "-f",
            path(file),
            &channel,
            "--plain-http",
        ])
    };
    let sign_with = |generation: u64, key: &Path, clusters: &str| {
        let unsigned = dir.join(format!("p-{generation}.yaml"));
        std::fs::write(
            &unsigned,
            example_without_defaults().replace(
                "  generation: 7\n",
                &format!("  generation: {generation}\n{clusters}"),
            ),
        )
        .unwrap();
        let signed = dir.join(format!("p-{generation}-signed.yaml"));
        let out = platform.plugin(
            None,
            &[
                "policy",
                "sign",
                "-f",
                path(&unsigned),
                "--key",
                path(key),
                "--out",
                path(&signed),
            ],
        );
        assert!(out.status.success(), "{out:?}");
        signed
    };

    // Keyring 1 names k1; the agent is installed with the root key only.
    publish_keyring(&keyring(1, &[&k1_pub], &[], &root_key));
    publish_policy(&sign_with(1, &platform.key, ""));
    let root_pub = root_dir.join("root.pub");
    let with_root = [
        ("TENANTFLUX_POLICY_ROOT_KEYS", path(&root_pub)),
        ("TENANTFLUX_POLICY_SOURCE", channel.as_str()),
        ("TENANTFLUX_POLICY_SOURCE_INTERVAL", "1s"),
        ("TENANTFLUX_POLICY_SOURCE_PLAIN_HTTP", "true"),
    ];
    cluster
        .restart_agent_with(&with_root)
        .expect("agent with the root key");
    let pid = cluster.agent_pid();
    let shown = wait_shown(&platform, "generation 1 under keyring 1", |s| {
        s["generation"] == 1 && s["keyringVersion"] == 1
    })
    .await;
    assert_eq!(shown["keyId"], k1_id.as_str(), "{shown:#}");

    // A key the keyring does not name is refused, pushed.
    let k2_key = k2_dir.join("ed25519.key");
    let out = platform.push(&sign_with(2, &k2_key, ""));
    // A key the agent does not trust is denied, as a bad signature is.
    assert_eq!(out.status.code(), Some(6), "{out:?}");
    let err = stderr(&out);
    assert!(
        err.contains(&format!("unknown key: the policy is signed with key \"{k2_id}\", which is not in keyring version 1")),
        "{err}"
    );

    // Rotation: keyring 2 names k2 and revokes k1; the policy signed by k2 follows.
    publish_keyring(&keyring(
        2,
        &[&k2_dir.join("ed25519.pub")],
        &[&k1_id],
        &root_key,
    ));
    publish_policy(&sign_with(3, &k2_key, ""));
    let shown = wait_shown(&platform, "generation 3 by k2 under keyring 2", |s| {
        s["generation"] == 3 && s["keyringVersion"] == 2
    })
    .await;
    assert_eq!(shown["keyId"], k2_id.as_str(), "{shown:#}");
    assert_eq!(cluster.agent_pid(), pid, "no restart");

    // The revoked key is refused.
    let out = platform.push(&sign_with(4, &platform.key, ""));
    assert_eq!(out.status.code(), Some(6), "{out:?}");
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "revoked key: the policy is signed with key {k1_id}, which keyring version 2 revokes"
        )),
        "{err}"
    );

    // Keyring 1 again, and a keyring signed by a key that is not the root: refused.
    publish_keyring(&keyring(1, &[&k1_pub], &[], &root_key));
    wait_shown(&platform, "the older keyring refused", |s| {
        policy_problems(s)
            .iter()
            .any(|p| p.contains("is refused: keyring version 1 is not newer than version 2"))
    })
    .await;
    publish_keyring(&keyring(3, &[&k1_pub], &[], &k2_key));
    let shown = wait_shown(&platform, "the keyring not signed by the root refused", |s| {
        policy_problems(s).iter().any(|p| {
            p.contains("keyring version 3 is signed by 0 of the installed root keys, fewer than the threshold 1")
        })
    })
    .await;
    assert_eq!(shown["keyringVersion"], 2, "{shown:#}");
    let stored = cluster
        .kubectl_ok(&[
            "-n",
            "tenantflux-system",
            "get",
            "configmap",
            "tenantflux-policy-keyring",
            "-o",
            "jsonpath={.data.signed-keyring\\.yaml}",
        ])
        .unwrap();
    assert!(stored.contains("version: 2"), "{stored}");

    // A policy for another cluster, by the right key, published: refused and reported.
    publish_policy(&sign_with(
        5,
        &k2_key,
        "  clusters: [{name: not-this-one}]\n",
    ));
    let shown = wait_shown(&platform, "the other cluster's policy refused", |s| {
        policy_problems(s).iter().any(|p| {
            p.contains(
                "generation 5 is for the clusters [name \"not-this-one\"], not for this cluster",
            )
        })
    })
    .await;
    assert_eq!(shown["generation"], 3, "{shown:#}");
    assert_eq!(cluster.agent_pid(), pid, "no restart");

    // Keyring 1 (validly signed by the root) written over the stored keyring while the agent
    // runs: put back from the one held, and reported.
    let stored_keyring = || {
        cluster
            .kubectl_ok(&[
                "-n",
                "tenantflux-system",
                "get",
                "configmap",
                "tenantflux-policy-keyring",
                "-o",
                "jsonpath={.data.signed-keyring\\.yaml}",
            ])
            .unwrap()
    };
    let older = std::fs::read_to_string(keyring(1, &[&k1_pub], &[], &root_key)).unwrap();
    let plant_older = || {
        cluster
            .kubectl_ok(&[
                "-n",
                "tenantflux-system",
                "patch",
                "configmap",
                "tenantflux-policy-keyring",
                "--type=merge",
                "-p",
                &serde_json::json!({"data": {"signed-keyring.yaml": older}}).to_string(),
            ])
            .expect("plant keyring 1")
    };
    plant_older();
    wait_shown(&platform, "the replaced keyring restored and reported", |s| {
        policy_problems(s).iter().any(|p| {
            p.contains("the keyring stored in ConfigMap tenantflux-system/tenantflux-policy-keyring was changed by someone other than the agent; the agent keeps version 2 and restored it")
        })
    })
    .await;
    wait_for(
        "the stored keyring restored",
        Duration::from_secs(30),
        || {
            let restored = stored_keyring().contains("version: 2");
            async move { restored.then_some(()) }
        },
    )
    .await
    .expect("keyring 2 stored again");

    // The same while the agent is stopped: at its start the record of the highest keyring
    // wins, the rollback is reported, and keyring 2 stays in force.
    cluster.stop_agent().expect("stopping the agent");
    plant_older();
    cluster
        .restart_agent_with(&with_root)
        .expect("agent restarted");
    let shown = wait_shown(&platform, "the rolled-back keyring reported at start", |s| {
        policy_problems(s).iter().any(|p| {
            p.contains("is version 1, lower than version 2 this cluster held: a rollback; the agent holds version 2 from ConfigMap tenantflux-system/tenantflux-policy-keyring-highest and restored it")
        })
    })
    .await;
    assert_eq!(shown["keyringVersion"], 2, "{shown:#}");
    assert_eq!(shown["generation"], 3, "{shown:#}");
    assert!(stored_keyring().contains("version: 2"));

    // The record deleted and the older keyring put back while the agent is stopped: the agent
    // cannot tell the version it held, but it can tell that its record is gone, and says so.
    cluster.stop_agent().expect("stopping the agent");
    cluster
        .kubectl_ok(&[
            "-n",
            "tenantflux-system",
            "delete",
            "configmap",
            "tenantflux-policy-keyring-highest",
        ])
        .expect("delete the keyring record");
    plant_older();
    cluster
        .restart_agent_with(&with_root)
        .expect("agent restarted");
    wait_shown(&platform, "the missing keyring record reported", |s| {
        policy_problems(s).iter().any(|p| {
            p.contains("ConfigMap tenantflux-system/tenantflux-policy-keyring-highest, the record of the highest keyring version, is missing beside the stored version 1: the record was deleted and a rollback cannot be ruled out")
        })
    })
    .await;
}
