//! Bundles that parse, and bundles that are refused, with the reason each gives.

use super::*;
use tenantflux_core::digest::sha256;

const NS: &str = "flux-system";

fn crd(name: &str) -> String {
    let (plural, group) = name.split_once('.').unwrap();
    format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n\
             metadata:\n  name: {name}\nspec:\n  group: {group}\n  names:\n    plural: {plural}\n"
    )
}

fn deployment(image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: flux-operator\n  \
             namespace: flux-system\n  labels:\n    app.kubernetes.io/name: flux-operator\n\
             spec:\n  template:\n    spec:\n      containers:\n      - name: manager\n        \
             image: {image}\n"
    )
}

/// A small install in the shape of flux-operator's (deliberately out of apply order).
fn install(image: &str) -> String {
    let mut docs = vec![
            deployment(image),
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: flux-system\n".to_owned(),
            "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: flux-operator\n  namespace: flux-system\n".to_owned(),
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: flux-operator-cluster-admin\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: cluster-admin\nsubjects:\n- kind: ServiceAccount\n  name: flux-operator\n  namespace: flux-system\n".to_owned(),
        ];
    docs.extend(OPERATOR_CRDS.iter().map(|n| crd(n)));
    format!("---\n{}---\n", docs.join("---\n"))
}

fn parse(yaml: &str) -> Result<Bundle, BundleError> {
    parse_with(yaml, false)
}

fn parse_with(yaml: &str, require_digest: bool) -> Result<Bundle, BundleError> {
    let images = ImageRules {
        registries: vec![
            "ghcr.io/controlplaneio-fluxcd/*".to_owned(),
            "registry.local:5000/*".to_owned(),
        ],
        require_digest,
        pod_fields: Vec::new(),
    };
    // The cluster RBAC checks run once the version is known; without a vouching they hold the
    // roles to the releases', as the install does.
    Bundle::parse(yaml, sha256(yaml.as_bytes()), NS, &images)
        .and_then(|b| b.check_cluster_rbac(&[]).map(|()| b))
}

#[test]
fn platform_pod_settings_are_refused_unless_allowed() {
    let image = "ghcr.io/controlplaneio-fluxcd/flux-operator:v0.58.1";
    let cozystack = install(image).replace(
        "    spec:\n      containers:\n      - name: manager\n",
        "    spec:\n      hostNetwork: true\n      tolerations:\n      - {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoSchedule}\n      containers:\n      - name: manager\n        resources: {requests: {cpu: 100m, memory: 350Mi}}\n",
    );
    assert_ne!(cozystack, install(image));
    let rules = |fields: &[&str]| ImageRules {
        registries: vec!["ghcr.io/controlplaneio-fluxcd/*".to_owned()],
        require_digest: false,
        pod_fields: fields.iter().map(|f| (*f).to_owned()).collect(),
    };
    let parse = |fields: &[&str]| {
        Bundle::parse(&cozystack, sha256(cozystack.as_bytes()), NS, &rules(fields))
    };
    assert_eq!(
        parse(&[]).unwrap_err().to_string(),
        "Deployment flux-operator sets spec.template.spec.hostNetwork, a pod setting beyond \
         flux-operator's releases; the platform allows none (--operator-allow-pod-fields \
         hostNetwork allows it)"
    );
    assert!(
        parse(&["hostNetwork"])
            .unwrap_err()
            .to_string()
            .contains("spec.template.spec.tolerations")
    );
    assert!(
        parse(&["hostNetwork", "tolerations"])
            .unwrap_err()
            .to_string()
            .contains("spec.template.spec.containers[0].resources, a pod setting")
    );
    parse(&["hostNetwork", "tolerations", "resources"]).expect("all allowed");
    // The releases' own resources need no allowance.
    let release = install(image).replace(
        "      - name: manager\n",
        "      - name: manager\n        resources: {limits: {cpu: 2000m, memory: 1Gi}, requests: {cpu: 10m, memory: 64Mi}}\n",
    );
    Bundle::parse(&release, sha256(release.as_bytes()), NS, &rules(&[])).unwrap();
}

#[test]
fn a_flux_operator_install_parses_in_apply_order_with_its_version() {
    let yaml = install("ghcr.io/controlplaneio-fluxcd/flux-operator:v0.58.1");
    let bundle = parse(&yaml).unwrap();
    assert_eq!(bundle.version, "v0.58.1");
    assert_eq!(bundle.semver, semver::Version::new(0, 58, 1));
    assert_eq!(bundle.digest, sha256(yaml.as_bytes()));
    let order: Vec<_> = bundle
        .objects
        .iter()
        .map(|o| o.reference.to_string())
        .collect();
    assert_eq!(
        order,
        [
            "CustomResourceDefinition fluxinstances.fluxcd.controlplane.io",
            "CustomResourceDefinition fluxreports.fluxcd.controlplane.io",
            "CustomResourceDefinition resourcesets.fluxcd.controlplane.io",
            "CustomResourceDefinition resourcesetinputproviders.fluxcd.controlplane.io",
            "Namespace flux-system",
            "ServiceAccount flux-system/flux-operator",
            "ClusterRoleBinding flux-operator-cluster-admin",
            "Deployment flux-system/flux-operator",
        ]
    );
    for object in &bundle.objects {
        assert_eq!(
            object.manifest["metadata"]["labels"][MANAGED_BY_LABEL], FIELD_MANAGER,
            "{}",
            object.reference
        );
    }
    assert_eq!(
        bundle.deployment().manifest["metadata"]["labels"]["app.kubernetes.io/name"],
        "flux-operator",
        "the bundle's own labels stay"
    );
    assert_eq!(bundle.stage(Stage::Crds).count(), 4);
}

#[test]
fn the_version_is_the_image_tag_which_the_label_must_agree_with() {
    let labelled = |image: &str, label: &str| {
        install(image).replace(
            "app.kubernetes.io/name: flux-operator\n",
            &format!(
                "app.kubernetes.io/name: flux-operator\n    app.kubernetes.io/version: {label}\n"
            ),
        )
    };
    let yaml = labelled(
        "registry.local:5000/flux-operator:v0.58.0@sha256:abc",
        "0.58.0",
    );
    assert_eq!(parse(&yaml).unwrap().version, "v0.58.0");
    let yaml = install("registry.local:5000/flux-operator:v0.58.0@sha256:abc");
    assert_eq!(parse(&yaml).unwrap().version, "v0.58.0");
    let yaml = labelled("registry.local:5000/flux-operator@sha256:abc", "v0.58.2");
    assert_eq!(
        parse(&yaml).unwrap().version,
        "v0.58.2",
        "no tag: the label"
    );
    let yaml = labelled("registry.local:5000/flux-operator:v0.58.0", "v0.58.2");
    assert_eq!(
        parse(&yaml).unwrap_err().to_string(),
        "Deployment flux-operator says version \"v0.58.2\" (label app.kubernetes.io/version) \
             but runs image tag \"v0.58.0\": the bundle's version must be the one it runs"
    );
}

#[test]
fn a_bundle_may_hold_only_what_flux_operators_install_holds() {
    let good = install("ghcr.io/controlplaneio-fluxcd/flux-operator:v0.58.1");
    let refusal = |yaml: &str| parse(yaml).unwrap_err().to_string();
    let foreign_crd = format!("{good}---\n{}", crd("widgets.example.com"));
    assert_eq!(
        refusal(&foreign_crd),
        "CustomResourceDefinition \"widgets.example.com\" has spec.group \"example.com\"; a \
             flux-operator bundle defines resources of fluxcd.controlplane.io only"
    );
    let disguised = format!(
        "{good}---\n{}",
        crd("widgets.fluxcd.controlplane.io")
            .replace("group: fluxcd.controlplane.io", "group: example.com")
    );
    assert!(refusal(&disguised).contains("has spec.group \"example.com\""));
    let role = format!(
        "{good}---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {{name: admin}}\nrules: []\n"
    );
    assert!(
        refusal(&role).starts_with("ClusterRole admin: a bundle creates only the cluster RBAC"),
        "{}",
        refusal(&role)
    );
    let widened = format!(
        "{good}---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: \
             {{name: flux-web-user}}\nrules:\n- apiGroups: ['']\n  resources: [secrets]\n  \
             verbs: [get, delete]\n"
    );
    assert!(
        refusal(&widened).contains("flux-web-user rules[0] grants \"delete\" on \"secrets\""),
        "{}",
        refusal(&widened)
    );
    let binding = |subject: &str| {
        good.replace(
                "subjects:\n- kind: ServiceAccount\n  name: flux-operator\n  namespace: flux-system\n",
                &format!("subjects:\n- kind: ServiceAccount\n  name: flux-operator\n  namespace: flux-system\n{subject}"),
            )
    };
    assert_eq!(
        refusal(&binding(
            "- kind: ServiceAccount\n  name: default\n  namespace: kube-system\n"
        )),
        "ClusterRoleBinding flux-operator-cluster-admin subjects[1] is \"ServiceAccount\" \
             \"default\" in namespace \"kube-system\"; a bundle binds roles only to ServiceAccounts \
             in the operator namespace \"flux-system\""
    );
    assert!(
        refusal(&binding(
            "- kind: User\n  name: mallory\n  apiGroup: rbac.authorization.k8s.io\n"
        ))
        .contains("subjects[1] is \"User\" \"mallory\";")
    );
    assert_eq!(
        refusal(&binding(
            "- kind: ServiceAccount\n  name: default\n  namespace: flux-system\n"
        )),
        "ClusterRoleBinding flux-operator-cluster-admin subjects[1] is ServiceAccount \
             \"default\", which the bundle does not hold; a bundle binds roles only to its own \
             ServiceAccounts (flux-operator)"
    );
    assert_eq!(
        refusal(&install("docker.io/evil/flux-operator:v0.58.1")),
        "Deployment flux-operator spec.template.spec.containers[0].image is \
             \"docker.io/evil/flux-operator:v0.58.1\", from none of the registries allowed \
             (ghcr.io/controlplaneio-fluxcd/*, registry.local:5000/*; --operator-image-registry)"
    );
    let sidecar = good.replace(
            "      containers:\n",
            "      initContainers:\n      - name: x\n        image: docker.io/evil/x:1\n      containers:\n",
        );
    // No release has init containers: refused before their images are looked at.
    assert!(
        refusal(&sidecar).contains("sets spec.template.spec.initContainers (containers beyond")
    );
}

#[test]
fn a_required_digest_pins_every_image() {
    let digest = "a".repeat(64);
    let pinned = install(&format!(
        "ghcr.io/controlplaneio-fluxcd/flux-operator:v0.58.1@sha256:{digest}"
    ));
    assert_eq!(parse_with(&pinned, true).unwrap().version, "v0.58.1");
    let tagged = install("ghcr.io/controlplaneio-fluxcd/flux-operator:v0.58.1");
    parse_with(&tagged, false).unwrap();
    assert_eq!(
        parse_with(&tagged, true).unwrap_err().to_string(),
        "Deployment flux-operator spec.template.spec.containers[0].image is \
             \"ghcr.io/controlplaneio-fluxcd/flux-operator:v0.58.1\", not pinned by digest \
             (--operator-require-image-digest: write it as NAME:TAG@sha256:DIGEST)"
    );
    let upper = format!("@sha256:{}", "A".repeat(64));
    for bad in ["@sha256:abc", upper.as_str(), "@sha512:aaaa"] {
        let yaml = install(&format!(
            "ghcr.io/controlplaneio-fluxcd/flux-operator:v0.58.1{bad}"
        ));
        assert!(
            parse_with(&yaml, true)
                .unwrap_err()
                .to_string()
                .contains("not pinned"),
            "{bad}: {:?}",
            parse_with(&yaml, true).map(|b| b.version)
        );
    }
    let sidecar = pinned.replace(
            "      containers:\n",
            "      initContainers:\n      - name: x\n        image: ghcr.io/controlplaneio-fluxcd/x:1\n      containers:\n",
        );
    assert!(
        parse_with(&sidecar, true)
            .unwrap_err()
            .to_string()
            .contains("sets spec.template.spec.initContainers")
    );
}

#[test]
fn every_refusal_names_what_is_wrong() {
    let good = install("ghcr.io/controlplaneio-fluxcd/flux-operator:v0.58.1");
    let refusal = |yaml: &str| parse(yaml).unwrap_err().to_string();

    assert_eq!(refusal("---\n---\n"), "the bundle holds no objects");
    assert!(refusal("kind: [unclosed").starts_with("the bundle is not valid YAML"));
    assert_eq!(
        refusal(&format!(
            "{good}---\nkind: ConfigMap\nmetadata: {{name: x}}\n"
        )),
        "document 9 of the bundle is not a Kubernetes object: no apiVersion"
    );
    let without_crd = good.replace(&crd("fluxinstances.fluxcd.controlplane.io"), "");
    assert_eq!(
        refusal(&without_crd),
        "the bundle lacks CustomResourceDefinition fluxinstances.fluxcd.controlplane.io: it \
             is not a flux-operator install"
    );
    let without_deployment = good.replace(
        &deployment("ghcr.io/controlplaneio-fluxcd/flux-operator:v0.58.1"),
        "",
    );
    assert!(
        refusal(&without_deployment)
            .starts_with("the bundle lacks Deployment flux-system/flux-operator"),
    );
    let secret = format!(
        "{good}---\napiVersion: v1\nkind: Secret\nmetadata: {{name: s, namespace: flux-system}}\n"
    );
    assert!(refusal(&secret).starts_with("the bundle holds Secret s (v1), a kind the agent"));
    let elsewhere = format!(
        "{good}---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: sa, namespace: kube-system}}\n"
    );
    assert!(
        refusal(&elsewhere).starts_with(
            "ServiceAccount kube-system/sa is not in the operator namespace \"flux-system\""
        ),
        "{}",
        refusal(&elsewhere)
    );
    let other_namespace =
        format!("{good}---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: other}}\n");
    assert!(refusal(&other_namespace).starts_with("Namespace other is not in the operator"));
    let twice = format!("{good}---\n{}", crd("fluxreports.fluxcd.controlplane.io"));
    assert_eq!(
        refusal(&twice),
        "the bundle holds CustomResourceDefinition fluxreports.fluxcd.controlplane.io twice"
    );
    let extra = format!(
        "{good}---\n{}",
        deployment("x:v1").replace(
            "name: flux-operator\n  namespace",
            "name: other\n  namespace"
        )
    );
    assert!(refusal(&extra).starts_with("the bundle holds Deployment flux-system/other;"));
    assert!(
        refusal(&install("ghcr.io/controlplaneio-fluxcd/flux-operator"))
            .contains("states no version")
    );
    assert!(
        refusal(&install(
            "ghcr.io/controlplaneio-fluxcd/flux-operator:latest"
        ))
        .starts_with("flux-operator version \"latest\" of the bundle is not a semantic")
    );
}

#[test]
fn allowed_versions_take_exact_versions_and_flux_style_ranges() {
    let v = |s: &str| semver::Version::parse(s).unwrap();
    let exact = AllowedVersions::parse("v0.58.1", "--operator-version").unwrap();
    assert!(exact.allows(&v("0.58.1")));
    assert!(
        !exact.allows(&v("0.58.2")),
        "an exact version is not a caret range"
    );
    let range = AllowedVersions::parse(">=v0.58.0 <0.59.0", "--operator-version").unwrap();
    assert!(range.allows(&v("0.58.0")) && range.allows(&v("0.58.9")));
    assert!(!range.allows(&v("0.59.0")) && !range.allows(&v("0.57.3")));
    let spaced = AllowedVersions::parse(">= 0.58.0, < 0.59.0", "x").unwrap();
    assert!(spaced.allows(&v("0.58.4")) && !spaced.allows(&v("0.59.0")));
    let wildcard = AllowedVersions::parse("0.58.x", "x").unwrap();
    assert!(wildcard.allows(&v("0.58.3")) && !wildcard.allows(&v("0.59.0")));
    let err = AllowedVersions::parse("latest", "x")
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("\"latest\" is neither a version"), "{err}");

    let bundle = parse(&install(
        "ghcr.io/controlplaneio-fluxcd/flux-operator:v0.58.1",
    ))
    .unwrap();
    bundle.check_version(&range).unwrap();
    let old = AllowedVersions::parse("v0.57.0", "--operator-version").unwrap();
    assert_eq!(
        bundle.check_version(&old).unwrap_err().to_string(),
        "flux-operator v0.58.1 is outside \"v0.57.0\" allowed by --operator-version"
    );
}

#[test]
fn pruning_keeps_crds_and_what_the_new_bundle_still_has() {
    let r = |api_version: &str, kind: &str, namespace: Option<&str>, name: &str| ObjectRef {
        api_version: api_version.into(),
        kind: kind.into(),
        namespace: namespace.map(Into::into),
        name: name.into(),
    };
    let crd = r(
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        None,
        "old.fluxcd.controlplane.io",
    );
    let role = r(
        "rbac.authorization.k8s.io/v1",
        "ClusterRole",
        None,
        "flux-web-user",
    );
    let sa = r("v1", "ServiceAccount", Some(NS), "flux-operator");
    let service = r("v1", "Service", Some(NS), "flux-operator");
    let unknown = r("v1", "Secret", Some(NS), "not-ours-to-touch");
    let namespace = r("v1", "Namespace", None, "flux-system");
    let previous = [
        crd,
        role.clone(),
        sa.clone(),
        service.clone(),
        unknown,
        namespace,
    ];
    assert_eq!(to_prune(&previous, &[sa]), [role, service]);
}

#[test]
fn digests_are_sha256_of_the_bytes() {
    assert_eq!(
        sha256(b""),
        "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
}

#[test]
fn kinds_map_to_their_api_resources() {
    let deployment = kind_of("apps/v1", "Deployment").unwrap();
    assert_eq!(deployment.group(), "apps");
    let resource = deployment.api_resource();
    assert_eq!(
        (
            resource.group.as_str(),
            resource.version.as_str(),
            resource.plural.as_str()
        ),
        ("apps", "v1", "deployments")
    );
    let namespace = kind_of("v1", "Namespace").unwrap();
    assert_eq!(namespace.group(), "");
    assert_eq!(namespace.api_resource().api_version, "v1");
    assert!(kind_of("apps/v1beta1", "Deployment").is_none());
}

#[test]
fn what_no_release_sets_is_refused_naming_the_object_and_field() {
    let image = "ghcr.io/controlplaneio-fluxcd/flux-operator:v0.58.1";
    let pod = "    spec:\n      containers:\n      - name: manager\n";
    let refused = |from: &str, to: &str| {
        let yaml = install(image).replace(from, to);
        assert_ne!(yaml, install(image), "{to}");
        parse(&yaml).unwrap_err().to_string()
    };
    let crd_name = OPERATOR_CRDS[0];
    let group = crd_name.split_once('.').unwrap().1;
    let conversion = refused(
        &format!("  group: {group}\n"),
        &format!(
            "  group: {group}\n  conversion:\n    strategy: Webhook\n    webhook:\n      clientConfig: {{url: \"https://evil.example/convert\"}}\n      conversionReviewVersions: [v1]\n"
        ),
    );
    assert!(
        conversion.starts_with("CustomResourceDefinition ")
            && conversion.contains(
                "sets spec.conversion (a conversion webhook receives and rewrites every object"
            ),
        "{conversion}"
    );
    for (to, field) in [
        (
            "    spec:\n      volumes:\n      - {name: root, hostPath: {path: /}}\n      containers:\n      - name: manager\n",
            "spec.template.spec.volumes[0].hostPath",
        ),
        (
            "    spec:\n      volumes:\n      - {name: tools, image: {reference: evil.example/tools:1}}\n      containers:\n      - name: manager\n",
            "spec.template.spec.volumes[0].image",
        ),
        (
            "    spec:\n      hostPID: true\n      containers:\n      - name: manager\n",
            "spec.template.spec.hostPID",
        ),
        (
            "    spec:\n      containers:\n      - name: manager\n        securityContext: {privileged: true}\n",
            "spec.template.spec.containers[0].securityContext.privileged",
        ),
        (
            "    spec:\n      containers:\n      - name: manager\n        securityContext: {capabilities: {add: [SYS_ADMIN]}}\n",
            "spec.template.spec.containers[0].securityContext.capabilities.add",
        ),
        (
            "    spec:\n      initContainers:\n      - {name: init, image: ghcr.io/controlplaneio-fluxcd/flux-operator:v0.58.1}\n      containers:\n      - name: manager\n",
            "spec.template.spec.initContainers",
        ),
    ] {
        let message = refused(pod, to);
        assert_eq!(
            message.split(" (").next().unwrap(),
            format!("Deployment flux-system/flux-operator sets {field}"),
            "{message}"
        );
        assert!(
            message.ends_with("which no flux-operator release sets; a bundle may not"),
            "{message}"
        );
    }
    let sidecar = refused(
        &format!("        image: {image}\n"),
        &format!("        image: {image}\n      - name: sidecar\n        image: {image}\n"),
    );
    assert!(
        sidecar.contains("sets spec.template.spec.containers[1]"),
        "{sidecar}"
    );
    // A Service that leaves the cluster.
    let service = "apiVersion: v1\nkind: Service\nmetadata:\n  name: flux-operator\n  namespace: flux-system\nspec:\n  ports: [{port: 8080}]\n";
    let with = |spec: &str| {
        let yaml = format!(
            "{}{}",
            install(image),
            service.replace("spec:\n", &format!("spec:\n{spec}"))
        );
        parse(&yaml)
    };
    with("").expect("a ClusterIP Service is the release's");
    let external = with("  externalIPs: [203.0.113.7]\n")
        .unwrap_err()
        .to_string();
    assert!(
        external.contains("sets spec.externalIPs (addresses outside the cluster)"),
        "{external}"
    );
    let balancer = with("  type: LoadBalancer\n").unwrap_err().to_string();
    assert!(balancer.contains("sets spec.type"), "{balancer}");
    // The release's own settings pass.
    let release = install(image).replace(
        pod,
        "    spec:\n      volumes:\n      - {name: temp, emptyDir: {}}\n      containers:\n      - name: manager\n        securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}\n",
    );
    parse(&release).expect("the release's pod spec");
}

#[test]
fn a_release_the_build_lacks_is_installed_only_as_vouched() {
    let role = "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: flux-operator-edit\nrules:\n- apiGroups: [fluxcd.controlplane.io]\n  resources: [fluxschedules]\n  verbs: [create]\n";
    let yaml = format!(
        "{}{role}",
        install("ghcr.io/controlplaneio-fluxcd/flux-operator:v0.61.0")
    );
    let digest = sha256(yaml.as_bytes());
    let parsed = || {
        let images = ImageRules {
            registries: vec!["ghcr.io/controlplaneio-fluxcd/*".to_owned()],
            require_digest: false,
            pod_fields: Vec::new(),
        };
        Bundle::parse(&yaml, digest.clone(), NS, &images).expect("structurally fine")
    };
    let vouching = |digest: &str, rules: Vec<ClusterRule>| Vouching {
        version: "v0.61.0".into(),
        digest: digest.into(),
        source: None,
        cluster_rules: rules,
    };
    let rule = ClusterRule {
        cluster_role: "flux-operator-edit".into(),
        api_groups: vec!["fluxcd.controlplane.io".into()],
        resources: vec!["fluxschedules".into()],
        verbs: vec!["create".into()],
    };
    let known = releases::KNOWN;

    // Not vouched: refused, naming the commands that vouch for it and the digest.
    let err = parsed()
        .check_release(known, &[], 0, &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("operator vouch"), "{err}");
    assert!(err.contains(&digest), "{err}");

    // Vouched for other bytes: refused naming both digests.
    let other = format!("sha256:{}", "0".repeat(64));
    let err = parsed()
        .check_release(known, &[vouching(&other, vec![rule.clone()])], 9, &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains(&other) && err.contains(&digest), "{err}");
    assert!(err.contains("generation 9"), "{err}");

    // Vouched, but without the rule the bundle adds: refused naming the grant.
    let err = parsed()
        .check_release(known, &[vouching(&digest, Vec::new())], 9, &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("\"create\" on \"fluxschedules\""), "{err}");

    // Vouched with the rule: trusted, and says by which generation.
    let mut bundle = parsed();
    bundle
        .check_release(known, &[vouching(&digest, vec![rule])], 9, &[])
        .unwrap();
    assert_eq!(bundle.trust, Trust::Vouched { generation: 9 });
}

#[test]
fn a_vouching_does_not_lift_what_no_release_sets() {
    let yaml = install("ghcr.io/controlplaneio-fluxcd/flux-operator:v0.61.0").replace(
        "      containers:\n",
        "      volumes:\n      - name: host\n        hostPath: {path: /}\n      containers:\n",
    );
    // Refused while parsing, before any vouching is looked at.
    let err = parse(&yaml).unwrap_err().to_string();
    assert!(err.contains("hostPath"), "{err}");
}

#[test]
fn a_release_bundle_moves_into_another_operator_namespace() {
    // flux-operator's releases name flux-system; Cozystack runs Flux in cozy-fluxcd.
    let yaml = install("ghcr.io/controlplaneio-fluxcd/flux-operator:v0.58.1");
    let images = ImageRules {
        registries: vec!["ghcr.io/controlplaneio-fluxcd/*".to_owned()],
        require_digest: false,
        pod_fields: Vec::new(),
    };
    let bundle = Bundle::parse(&yaml, sha256(yaml.as_bytes()), "cozy-fluxcd", &images)
        .and_then(|b| b.check_cluster_rbac(&[]).map(|()| b))
        .unwrap();
    assert_eq!(bundle.digest, sha256(yaml.as_bytes()), "the bytes read");
    let names: Vec<String> = bundle
        .objects
        .iter()
        .map(|o| o.reference.to_string())
        .collect();
    assert!(
        names.contains(&"Namespace cozy-fluxcd".to_owned()),
        "{names:?}"
    );
    assert!(
        names.contains(&"Deployment cozy-fluxcd/flux-operator".to_owned()),
        "{names:?}"
    );
    assert!(
        !names.iter().any(|n| n.contains("flux-system")),
        "{names:?}"
    );
    let binding = bundle
        .objects
        .iter()
        .find(|o| o.reference.name == "flux-operator-cluster-admin")
        .unwrap();
    assert_eq!(binding.manifest["subjects"][0]["namespace"], "cozy-fluxcd");
    // Two namespaces: nothing moves, and what is outside the operator namespace is refused.
    let split = format!(
        "{yaml}---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: sa, namespace: cozy-fluxcd}}\n"
    );
    let refused = Bundle::parse(&split, sha256(split.as_bytes()), "cozy-fluxcd", &images)
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("is not in the operator namespace"),
        "{refused}"
    );
}
