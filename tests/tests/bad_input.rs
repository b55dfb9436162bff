//! The bad-input catalogue: malformed policy files, instance files, command-line arguments and
//! raw gRPC requests (oversized, wrong wire types, invalid UTF-8, huge selectors, path-like
//! names) sent to the real agent on a real control plane. Each must fail with a clear error
//! (what, where, what to do) and the right exit code or gRPC code, and change nothing in the
//! cluster: the FluxInstance, the Kustomizations, the stored policy and the admission policy
//! are compared before and after every case.

use std::time::Duration;

use serde_json::Value;
use tenantflux_proto::v1::{
    ApplyInstanceRequest, GetObjectRequest, ListObjectsRequest, ObjectRef, PushPolicyRequest,
    ReconcileRequest, StatusSelector, SuspendRequest, WatchObjectsRequest,
    instance_client::InstanceClient, policy_client::PolicyClient,
    workloads_client::WorkloadsClient,
};
use tenantflux_tests::{
    TestCluster, path,
    tenant::{APPS, Tenant, compliant_instance, example_without_defaults},
};
use tonic::{
    Code, Request, Status,
    codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder},
    codegen::http::uri::PathAndQuery,
    transport::Channel,
};

/// What a case sends.
enum Input {
    /// `kubectl tenantflux ARGS` as the cluster admin; `@NAME` in an argument is the path of
    /// the case's file NAME.
    Cli(Vec<String>),
    /// A typed request with the admin's token.
    Grpc(Call),
    /// Bytes as the body of the unary method PATH, with the admin's token.
    Raw(&'static str, Vec<u8>),
}

enum Call {
    List(ListObjectsRequest),
    Get(GetObjectRequest),
    Watch(WatchObjectsRequest),
    Suspend(SuspendRequest),
    Reconcile(ReconcileRequest),
    Apply(ApplyInstanceRequest),
    Push(PushPolicyRequest),
    /// GetObject without a token, or with the given one.
    Token(Option<&'static str>),
}

/// What a case must answer.
enum Want {
    /// The plugin's exit code and phrases of its stderr.
    Exit(i32, &'static [&'static str]),
    /// The gRPC code and phrases of its message.
    Code(Code, &'static [&'static str]),
}

struct Case {
    name: &'static str,
    files: Vec<(&'static str, Vec<u8>)>,
    input: Input,
    want: Want,
}

fn cli(args: &[&str]) -> Input {
    Input::Cli(args.iter().map(|a| (*a).to_owned()).collect())
}

fn object(kind: &str, namespace: &str, name: &str) -> Option<ObjectRef> {
    Some(ObjectRef {
        kind: kind.into(),
        namespace: namespace.into(),
        name: name.into(),
    })
}

/// A message of bytes as they are: the raw gRPC cases send what no generated client would.
#[derive(Clone, Copy, Default)]
struct RawCodec;
struct RawEncoder;
struct RawDecoder;

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;
    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }
    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

impl Encoder for RawEncoder {
    type Item = Vec<u8>;
    type Error = Status;
    fn encode(&mut self, item: Vec<u8>, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        use prost::bytes::BufMut as _;
        buf.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawDecoder {
    type Item = Vec<u8>;
    type Error = Status;
    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        use prost::bytes::Buf as _;
        let len = buf.remaining();
        Ok(Some(buf.copy_to_bytes(len).to_vec()))
    }
}

/// `field` as a length-delimited protobuf field holding `bytes`.
fn field(number: u8, bytes: &[u8]) -> Vec<u8> {
    let mut out = vec![(number << 3) | 2];
    let mut len = bytes.len();
    loop {
        let byte = (len & 0x7f) as u8;
        len >>= 7;
        if len == 0 {
            out.push(byte);
            break;
        }
        out.push(byte | 0x80);
    }
    out.extend_from_slice(bytes);
    out
}

fn with_token<T>(message: T, token: Option<&str>) -> Request<T> {
    let mut request = Request::new(message);
    if let Some(token) = token {
        request.metadata_mut().insert(
            "authorization",
            format!("Bearer {token}").parse().expect("ASCII token"),
        );
    }
    request
}

async fn call(channel: &Channel, token: &str, input: Call) -> Result<(), Status> {
    let mut workloads = WorkloadsClient::new(channel.clone());
    let t = Some(token);
    match input {
        Call::List(r) => workloads.list_objects(with_token(r, t)).await.map(drop),
        Call::Get(r) => workloads.get_object(with_token(r, t)).await.map(drop),
        Call::Watch(r) => workloads.watch_objects(with_token(r, t)).await.map(drop),
        Call::Suspend(r) => workloads.suspend(with_token(r, t)).await.map(drop),
        Call::Reconcile(r) => workloads.reconcile(with_token(r, t)).await.map(drop),
        Call::Apply(r) => InstanceClient::new(channel.clone())
            .apply_instance(with_token(r, t))
            .await
            .map(drop),
        Call::Push(r) => PolicyClient::new(channel.clone())
            .push_policy(with_token(r, t))
            .await
            .map(drop),
        Call::Token(token) => {
            let request = GetObjectRequest {
                object: object("ks", APPS, "podinfo"),
            };
            workloads
                .get_object(with_token(request, token))
                .await
                .map(drop)
        }
    }
}

async fn raw(channel: &Channel, token: &str, method: &'static str, body: Vec<u8>) -> Status {
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.expect("the agent's channel is ready");
    let result = grpc
        .unary(
            with_token(body, Some(token)),
            PathAndQuery::from_static(method),
            RawCodec,
        )
        .await;
    result.expect_err("a malformed request must fail")
}

fn instance_yaml(change: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut instance = compliant_instance();
    change(&mut instance);
    tenantflux_core::yaml::to_string(&instance)
        .unwrap()
        .into_bytes()
}

fn indent(text: &[u8], prefix: &str) -> Vec<u8> {
    String::from_utf8_lossy(text)
        .lines()
        .map(|l| format!("{prefix}{l}\n"))
        .collect::<String>()
        .into_bytes()
}

/// A YAML document whose aliases expand to 10^9 entries ("billion laughs").
fn yaml_bomb(prefix: &str) -> Vec<u8> {
    let mut text = format!("{prefix}a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..10 {
        let prev = i - 1;
        text.push_str(&format!(
            "a{i}: &a{i} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"
        ));
    }
    text.into_bytes()
}

fn cases(tenant: &Tenant) -> Vec<Case> {
    let example = example_without_defaults();
    let signed_text =
        std::fs::read_to_string(tenant.dir.path().join("policy-7-signed.yaml")).unwrap();
    let stale = std::fs::read(tenant.sign(
        "policy-6",
        &example.replace("generation: 7", "generation: 6"),
    ))
    .unwrap();
    let tampered = signed_text.replace("generation: 7", "generation: 9");
    let huge_selector = format!("team in ({})", vec!["a"; 40_000].join(","));
    let big = "x".repeat(2 * 1024 * 1024);
    let policy_head = "apiVersion: tenantflux.io/v1alpha1\nkind: Policy\nmetadata: {name: p}\nspec:\n  generation: 1\n  defaults:\n";
    let policy_edit = |from: &str, to: &str| {
        assert!(example.contains(from), "{from}");
        example.replace(from, to).into_bytes()
    };
    let sign_case = |name, text: Vec<u8>, want: &'static [&'static str]| Case {
        name,
        files: vec![("policy.yaml", text)],
        input: cli(&[
            "policy",
            "sign",
            "-f",
            "@policy.yaml",
            "--key",
            path(&tenant.key),
        ]),
        want: Want::Exit(1, want),
    };
    // `exit`: 1 for a file that is wrong, 4 for one the agent's policy rules refuse, 6 for a
    // signature it does not trust.
    let push_case = |name, text: Vec<u8>, exit: i32, want: &'static [&'static str]| Case {
        name,
        files: vec![("signed.yaml", text)],
        input: cli(&["policy", "push", "-f", "@signed.yaml"]),
        want: Want::Exit(exit, want),
    };
    let apply_case = |name, text: Vec<u8>, exit: i32, want: &'static [&'static str]| Case {
        name,
        files: vec![("flux.yaml", text)],
        input: cli(&["instance", "apply", "-f", "@flux.yaml"]),
        want: Want::Exit(exit, want),
    };
    let grpc = |name, call: Call, code: Code, want: &'static [&'static str]| Case {
        name,
        files: Vec::new(),
        input: Input::Grpc(call),
        want: Want::Code(code, want),
    };
    let cli_case = |name, args: &[&str], exit: i32, want: &'static [&'static str]| Case {
        name,
        files: Vec::new(),
        input: cli(args),
        want: Want::Exit(exit, want),
    };
    vec![
        // Policy files, checked by the same parser in the plugin (sign) and the agent (push).
        sign_case(
            "policy: unknown field",
            policy_edit("  generation: 7\n", "  generation: 7\n  colour: blue\n"),
            &["unknown field `colour`"],
        ),
        sign_case(
            "policy: wrong type for generation",
            policy_edit("generation: 7", "generation: seven"),
            &["spec.generation: invalid u64"],
        ),
        sign_case(
            "policy: generation 0",
            policy_edit("generation: 7", "generation: 0"),
            &["spec.generation must be 1 or more"],
        ),
        sign_case(
            "policy: wrong apiVersion",
            policy_edit("apiVersion: tenantflux.io/v1alpha1", "apiVersion: v1"),
            &["apiVersion is \"v1\"; a policy is tenantflux.io/v1alpha1"],
        ),
        sign_case(
            "policy: not a semver range",
            policy_edit(">=2.7.0 <2.10.0", "2.7 or later"),
            &["spec.distribution.versions"],
        ),
        sign_case(
            "policy: unknown component",
            policy_edit(
                "      - source-watcher\n",
                "      - source-watcher\n      - flux-ui\n",
            ),
            &["spec.components.allowed names \"flux-ui\", which is not a Flux component"],
        ),
        sign_case(
            "policy: empty registry list",
            policy_edit(
                "registries: [\"ghcr.io/fluxcd\", \"registry.example.com/fluxcd\"]",
                "registries: []",
            ),
            &["spec.distribution.registries is empty"],
        ),
        sign_case(
            "policy: not a date",
            policy_edit("2026-09-01", "2026-02-30"),
            &["\"2026-02-30\" is not a date (YYYY-MM-DD)"],
        ),
        sign_case(
            "policy: YAML alias bomb in spec.defaults",
            [policy_head.as_bytes(), &indent(&yaml_bomb(""), "    ")].concat(),
            &["not valid YAML", "exceeds the parser's limits"],
        ),
        sign_case(
            "policy: spec.defaults nested 100000 deep",
            format!(
                "{policy_head}    a: {}{}\n",
                "[".repeat(100_000),
                "]".repeat(100_000)
            )
            .into_bytes(),
            &["not valid YAML", "recursion limit exceeded"],
        ),
        push_case("push: not YAML", b"::: [".to_vec(), 1, &["not valid YAML"]),
        push_case(
            "push: an unsigned policy",
            example.clone().into_bytes(),
            1,
            &["unknown field `metadata`"],
        ),
        push_case(
            "push: changed after signing",
            tampered.into_bytes(),
            6,
            &["bad signature"],
        ),
        push_case(
            "push: stale generation",
            stale,
            4,
            &[
                "stale generation 6 ≤ 7",
                "sign the change as generation 8 or higher",
            ],
        ),
        push_case(
            "push: invalid UTF-8",
            b"apiVersion: tenantflux.io/v1alpha1\nkind: \xff\xfe\n".to_vec(),
            1,
            &["valid UTF-8"],
        ),
        push_case("push: empty file", Vec::new(), 1, &["not valid YAML"]),
        push_case(
            "push: a signed policy padded to 2 MiB",
            format!("{signed_text}# {big}\n").into_bytes(),
            1,
            &["1048576"],
        ),
        // FluxInstance files through the agent.
        apply_case(
            "instance: not YAML",
            b"spec: [".to_vec(),
            1,
            &["not valid YAML"],
        ),
        apply_case(
            "instance: a list",
            b"- apiVersion: fluxcd.controlplane.io/v1\n".to_vec(),
            1,
            &["not an object"],
        ),
        apply_case(
            "instance: wrong kind",
            instance_yaml(|i| i["kind"] = "Kustomization".into()),
            1,
            &["kind is \"Kustomization\"; expected FluxInstance"],
        ),
        apply_case(
            "instance: wrong name",
            instance_yaml(|i| i["metadata"]["name"] = "flux2".into()),
            1,
            &["only the FluxInstance named \"flux\""],
        ),
        apply_case(
            "instance: path-like namespace",
            instance_yaml(|i| i["metadata"]["namespace"] = "../kube-system".into()),
            1,
            &[
                "metadata.namespace is \"../kube-system\"; the FluxInstance lives in \"flux-system\"",
            ],
        ),
        apply_case(
            "instance: no spec",
            instance_yaml(|i| {
                i.as_object_mut().unwrap().remove("spec");
            }),
            1,
            &["spec is missing"],
        ),
        apply_case(
            "instance: unknown field",
            instance_yaml(|i| i["spec"]["colour"] = "blue".into()),
            1,
            &[
                "the API server refused the FluxInstance; nothing was changed",
                "colour",
            ],
        ),
        apply_case(
            "instance: wrong type",
            instance_yaml(|i| i["spec"]["distribution"]["version"] = 2.9.into()),
            // The policy's evaluation refuses it (a version must be a string): 4.
            4,
            &[
                "nothing was changed",
                "spec.distribution.version is 2.9, not a string",
            ],
        ),
        apply_case(
            "instance: breaks the policy",
            instance_yaml(|i| i["spec"]["distribution"]["registry"] = "docker.io/evil".into()),
            4,
            &[
                "breaks policy \"platform\" generation 7; nothing was changed",
                "spec.distribution.registry \"docker.io/evil\" is not one of",
            ],
        ),
        apply_case(
            "instance: two documents",
            [
                instance_yaml(|_| {}),
                b"---\n".to_vec(),
                instance_yaml(|_| {}),
            ]
            .concat(),
            1,
            &["more than one document"],
        ),
        apply_case(
            "instance: invalid UTF-8",
            [instance_yaml(|_| {}), b"# \xc3\x28\n".to_vec()].concat(),
            1,
            &["valid UTF-8"],
        ),
        apply_case(
            "instance: YAML alias bomb",
            yaml_bomb("apiVersion: fluxcd.controlplane.io/v1\nkind: FluxInstance\n"),
            1,
            &["not valid YAML"],
        ),
        // Command-line arguments.
        cli_case(
            "cli: unknown command",
            &["frobnicate"],
            2,
            &["unrecognized subcommand 'frobnicate'"],
        ),
        cli_case(
            "cli: unknown flag",
            &["get", "ks", "--colour=red"],
            2,
            &["unexpected argument '--colour'"],
        ),
        cli_case(
            "cli: unknown output format",
            &["get", "ks", "-o", "xml"],
            2,
            &["invalid value 'xml'", "table, json, yaml"],
        ),
        cli_case(
            "cli: not a duration",
            &["status", "--request-timeout", "soon"],
            2,
            &["soon"],
        ),
        cli_case(
            "cli: suspend without a name",
            &["suspend", "ks"],
            2,
            &["NAME"],
        ),
        cli_case(
            "cli: unknown kind",
            &["get", "deployment", "-n", APPS],
            1,
            &["unknown kind \"deployment\"; known kinds:"],
        ),
        cli_case(
            "cli: missing object",
            &["suspend", "ks", "nothere", "-n", APPS],
            1,
            &["Kustomization apps/nothere not found"],
        ),
        cli_case(
            "cli: path-like name",
            &["suspend", "ks", "podinfo/status", "-n", APPS],
            1,
            &["name \"podinfo/status\" is not a Kubernetes name"],
        ),
        cli_case(
            "cli: dot-dot name",
            &["reconcile", "ks", "../../kube-system", "-n", APPS],
            1,
            &["is not a Kubernetes name"],
        ),
        cli_case(
            "cli: invalid namespace",
            &["get", "ks", "-n", "Apps_1"],
            1,
            &["namespace \"Apps_1\" is not a Kubernetes name"],
        ),
        cli_case(
            "cli: unbalanced selector",
            &["get", "ks", "-n", APPS, "-l", "team in (a"],
            1,
            &["invalid label selector \"team in (a\": unbalanced '('"],
        ),
        cli_case(
            "cli: bad status selector",
            &["get", "ks", "-n", APPS, "--status-selector", "ready=maybe"],
            1,
            &["the status must be true, false or unknown"],
        ),
        cli_case(
            "cli: trace of a path-like name",
            &["trace", "deployment", "../x", "-n", APPS],
            1,
            &["is not a Kubernetes name"],
        ),
        cli_case(
            "cli: events of an unknown type",
            &["events", "-n", APPS, "--types", "Error"],
            1,
            &["event type \"Error\" is not supported: use Normal or Warning"],
        ),
        cli_case(
            "cli: tree of a source",
            &["tree", "gitrepo", "podinfo", "-n", APPS],
            1,
            &[
                "tree shows the inventory of a Kustomization, HelmRelease or ResourceSet, not of a GitRepository",
            ],
        ),
        cli_case(
            "cli: force on a Kustomization",
            &["reconcile", "ks", "podinfo", "-n", APPS, "--force"],
            1,
            &["force applies to HelmReleases only"],
        ),
        Case {
            name: "cli: 120 KiB label selector",
            files: Vec::new(),
            input: Input::Cli(vec![
                "get".into(),
                "ks".into(),
                "-n".into(),
                APPS.into(),
                "-l".into(),
                huge_selector.chars().take(120 * 1024).collect(),
            ]),
            want: Want::Exit(
                1,
                &[
                    "invalid label selector",
                    "bytes is longer than the 16384 a selector may have",
                ],
            ),
        },
        // Typed gRPC requests no plugin would send.
        grpc(
            "grpc: GetObject without an object",
            Call::Get(GetObjectRequest { object: None }),
            Code::InvalidArgument,
            &["GetObject needs a namespace and a name"],
        ),
        grpc(
            "grpc: Suspend a status subresource",
            Call::Suspend(SuspendRequest {
                object: object("ks", APPS, "podinfo/status"),
            }),
            Code::InvalidArgument,
            &["name \"podinfo/status\" is not a Kubernetes name"],
        ),
        grpc(
            "grpc: Reconcile a 300-character name",
            Call::Reconcile(ReconcileRequest {
                object: object("ks", APPS, &"a".repeat(300)),
                with_source: false,
                force: false,
            }),
            Code::InvalidArgument,
            &["is not a Kubernetes name", "(300 bytes)"],
        ),
        grpc(
            "grpc: GetObject in namespace ..",
            Call::Get(GetObjectRequest {
                object: object("ks", "..", "podinfo"),
            }),
            Code::InvalidArgument,
            &["namespace \"..\" is not a Kubernetes name"],
        ),
        grpc(
            "grpc: ListObjects of a 1 MiB kind",
            Call::List(ListObjectsRequest {
                kind: "k".repeat(1024 * 1024 - 64),
                ..Default::default()
            }),
            Code::InvalidArgument,
            &["unknown kind \"kkkk", "(1048512 bytes)"],
        ),
        grpc(
            "grpc: ListObjects with a 1 MiB selector",
            Call::List(ListObjectsRequest {
                kind: "ks".into(),
                namespace: APPS.into(),
                label_selector: huge_selector.chars().take(1024 * 1024 - 64).collect(),
                status_selector: None,
            }),
            Code::InvalidArgument,
            &["bytes is longer than the 16384 a selector may have"],
        ),
        grpc(
            "grpc: WatchObjects with a path-like name",
            Call::Watch(WatchObjectsRequest {
                kind: "ks".into(),
                namespace: APPS.into(),
                name: "a/../../b".into(),
                ..Default::default()
            }),
            Code::InvalidArgument,
            &["name \"a/../../b\" is not a Kubernetes name"],
        ),
        grpc(
            "grpc: ListObjects with an empty status type",
            Call::List(ListObjectsRequest {
                kind: "ks".into(),
                namespace: APPS.into(),
                label_selector: String::new(),
                status_selector: Some(StatusSelector {
                    r#type: String::new(),
                    status: "true".into(),
                }),
            }),
            Code::InvalidArgument,
            &["the condition type is empty"],
        ),
        grpc(
            "grpc: Suspend an unknown kind",
            Call::Suspend(SuspendRequest {
                object: object("", APPS, "podinfo"),
            }),
            Code::InvalidArgument,
            &["unknown kind \"\""],
        ),
        grpc(
            "grpc: ApplyInstance of 2 MiB",
            Call::Apply(ApplyInstanceRequest {
                manifest: big.clone(),
                dry_run: false,
            }),
            Code::OutOfRange,
            &["1048576"],
        ),
        grpc(
            "grpc: ApplyInstance of an empty manifest",
            Call::Apply(ApplyInstanceRequest {
                manifest: String::new(),
                dry_run: false,
            }),
            Code::InvalidArgument,
            &["the manifest is not an object"],
        ),
        grpc(
            "grpc: PushPolicy of 2 MiB",
            Call::Push(PushPolicyRequest {
                signed_policy: big.clone(),
            }),
            Code::OutOfRange,
            &["1048576"],
        ),
        grpc(
            "grpc: PushPolicy of a signed envelope with an extra field",
            Call::Push(PushPolicyRequest {
                signed_policy: format!("{signed_text}extra: 1\n"),
            }),
            Code::InvalidArgument,
            &["unknown field `extra`"],
        ),
        grpc(
            "grpc: no token",
            Call::Token(None),
            Code::Unauthenticated,
            &["missing bearer token"],
        ),
        grpc(
            "grpc: a token the API server does not know",
            Call::Token(Some("not-a-token")),
            Code::Unauthenticated,
            &[],
        ),
        // Raw bytes.
        Case {
            name: "raw: invalid UTF-8 in a string field",
            files: Vec::new(),
            input: Input::Raw(
                "/tenantflux.v1.Workloads/ListObjects",
                field(1, b"k\xff\xfes"),
            ),
            want: Want::Code(
                Code::Internal,
                &["failed to decode Protobuf message", "UTF-8"],
            ),
        },
        Case {
            name: "raw: a string field sent as a varint",
            files: Vec::new(),
            input: Input::Raw("/tenantflux.v1.Workloads/ListObjects", vec![0x08, 0x01]),
            want: Want::Code(
                Code::Internal,
                &["failed to decode Protobuf message", "wire type"],
            ),
        },
        Case {
            name: "raw: a truncated message",
            files: Vec::new(),
            input: Input::Raw("/tenantflux.v1.Policy/PushPolicy", vec![0x0a, 0x10, b'k']),
            want: Want::Code(Code::Internal, &["failed to decode Protobuf message"]),
        },
        Case {
            name: "raw: a length beyond the message",
            files: Vec::new(),
            input: Input::Raw(
                "/tenantflux.v1.Instance/ApplyInstance",
                vec![0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f],
            ),
            want: Want::Code(Code::Internal, &["failed to decode Protobuf message"]),
        },
        Case {
            name: "raw: 2 MiB of zeros",
            files: Vec::new(),
            input: Input::Raw(
                "/tenantflux.v1.Workloads/GetObject",
                vec![0; 2 * 1024 * 1024],
            ),
            want: Want::Code(Code::OutOfRange, &["1048576"]),
        },
        Case {
            name: "raw: an unknown method",
            files: Vec::new(),
            input: Input::Raw("/tenantflux.v1.Workloads/DeleteEverything", Vec::new()),
            want: Want::Code(Code::Unimplemented, &[]),
        },
    ]
}

/// The kind of input a case sends: each is its own test, so that a failure names the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    /// `policy sign -f FILE`
    PolicyToSign,
    /// `policy push -f FILE`
    SignedPolicy,
    /// `instance apply -f FILE`
    InstanceFile,
    /// Any other command line.
    Arguments,
    /// A typed gRPC request.
    Grpc,
    /// Raw bytes as a gRPC body.
    RawGrpc,
}

fn class(input: &Input) -> Class {
    match input {
        Input::Cli(args) => match (
            args.first().map(String::as_str),
            args.get(1).map(String::as_str),
        ) {
            (Some("policy"), Some("sign")) => Class::PolicyToSign,
            (Some("policy"), Some("push")) => Class::SignedPolicy,
            (Some("instance"), Some("apply")) => Class::InstanceFile,
            _ => Class::Arguments,
        },
        Input::Grpc(_) => Class::Grpc,
        Input::Raw(..) => Class::RawGrpc,
    }
}

/// The module's own cluster (the cases compare the whole cluster before and after, which a
/// test changing the shared one would break) with the tenant's keys, policy and Flux objects.
static PREPARED: tokio::sync::OnceCell<Tenant<'static>> = tokio::sync::OnceCell::const_new();
/// One case at a time: each compares the cluster before and after.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Sends every case of `wanted` to the real agent and checks its answer, and that the cluster
/// is unchanged after each.
async fn refused_clearly_and_nothing_changes(wanted: Class) {
    let tenant = PREPARED
        .get_or_init(|| Tenant::prepare(TestCluster::own("bad-input"), &[]))
        .await;
    let _one = ONE_AT_A_TIME.lock().await;
    let cluster = tenant.cluster;
    let token = tenant.admin_token();
    let channel = tonic::transport::Endpoint::from_shared(cluster.agent_grpc_address())
        .unwrap()
        .timeout(Duration::from_secs(30))
        .connect()
        .await
        .expect("connecting to the agent");
    let before = tenant.fingerprint().expect("fingerprint");
    let all = cases(tenant);
    assert!(all.len() >= 40, "{} cases", all.len());
    let cases: Vec<Case> = all
        .into_iter()
        .filter(|c| class(&c.input) == wanted)
        .collect();
    assert!(!cases.is_empty(), "no case of {wanted:?}");
    let mut failures = Vec::new();
    for case in cases {
        let dir = tempfile::tempdir().unwrap();
        for (name, bytes) in &case.files {
            std::fs::write(dir.path().join(name), bytes).unwrap();
        }
        let (code, message) = match case.input {
            Input::Cli(args) => {
                let args: Vec<String> = args
                    .into_iter()
                    .map(|a| match a.strip_prefix('@') {
                        Some(file) => path(&dir.path().join(file)).to_owned(),
                        None => a,
                    })
                    .collect();
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let output = tenant.plugin(&args);
                (
                    Err(output.status.code().unwrap_or(-1)),
                    String::from_utf8_lossy(&output.stderr).into_owned(),
                )
            }
            Input::Grpc(request) => match call(&channel, &token, request).await {
                Ok(()) => (Ok(Code::Ok), String::new()),
                Err(status) => (Ok(status.code()), status.message().to_owned()),
            },
            Input::Raw(method, body) => {
                let status = raw(&channel, &token, method, body).await;
                (Ok(status.code()), status.message().to_owned())
            }
        };
        let (code_ok, phrases) = match case.want {
            Want::Exit(want, phrases) => (code == Err(want), phrases),
            Want::Code(want, phrases) => (code == Ok(want), phrases),
        };
        let missing: Vec<&&str> = phrases.iter().filter(|p| !message.contains(**p)).collect();
        let bounded = message.len() <= 4096;
        let after = tenant.fingerprint().expect("fingerprint");
        let unchanged = after == before;
        if !code_ok || !missing.is_empty() || !bounded || !unchanged {
            failures.push(format!(
                "{}: got {code:?} {:?}{}{}{}",
                case.name,
                message.chars().take(600).collect::<String>(),
                if missing.is_empty() {
                    String::new()
                } else {
                    format!("; missing {missing:?}")
                },
                if bounded {
                    ""
                } else {
                    "; message longer than 4 KiB"
                },
                if unchanged {
                    String::new()
                } else {
                    format!("; THE CLUSTER CHANGED: before {before}, after {after}")
                },
            ));
        } else {
            eprintln!(
                "ok: {}: {}",
                case.name,
                message.lines().last().unwrap_or("")
            );
        }
    }
    // The agent took all of it and still serves.
    let output = tenant.plugin(&["get", "ks", "podinfo", "-n", APPS, "-o", "json"]);
    assert!(output.status.success(), "{output:?}");
    assert!(
        failures.is_empty(),
        "{} {wanted:?} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[tokio::test]
async fn policy_files_to_sign_are_refused_clearly() {
    refused_clearly_and_nothing_changes(Class::PolicyToSign).await;
}

#[tokio::test]
async fn signed_policies_the_agent_must_not_take_are_refused_and_change_nothing() {
    refused_clearly_and_nothing_changes(Class::SignedPolicy).await;
}

#[tokio::test]
async fn instance_files_that_break_the_rules_are_refused_and_change_nothing() {
    refused_clearly_and_nothing_changes(Class::InstanceFile).await;
}

#[tokio::test]
async fn bad_arguments_are_refused_clearly_and_change_nothing() {
    refused_clearly_and_nothing_changes(Class::Arguments).await;
}

#[tokio::test]
async fn malformed_grpc_requests_are_refused_with_their_code_and_change_nothing() {
    refused_clearly_and_nothing_changes(Class::Grpc).await;
}

#[tokio::test]
async fn raw_grpc_bodies_are_refused_with_their_code_and_change_nothing() {
    refused_clearly_and_nothing_changes(Class::RawGrpc).await;
}
