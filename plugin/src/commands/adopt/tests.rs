use super::*;

fn object(kind: &str, namespace: &str, name: &str, version: &str, release: &str) -> ObjectView {
    ObjectView {
        kind: kind.into(),
        namespace: namespace.into(),
        name: name.into(),
        version: version.into(),
        helm_release: release.into(),
        managers: if release.is_empty() {
            Vec::new()
        } else {
            vec!["helm".into(), "kubectl".into()]
        },
        generation: 1,
    }
}

/// A plan with every section: refused, with a rollout, violations, Helm's records and marks
/// still to be made.
fn full() -> PlanView {
    PlanView {
        case: "refused".into(),
        summary: "flux-operator v0.58.1 from Helm release flux-operator".into(),
        namespace: "flux-system".into(),
        operators: vec![object(
            "Deployment",
            "flux-system",
            "flux-operator",
            "v0.58.1",
            "flux-operator",
        )],
        instances: vec![object(
            "FluxInstance",
            "flux-system",
            "flux",
            "2.x",
            "flux-instance",
        )],
        controllers: vec![object(
            "Deployment",
            "flux-system",
            "source-controller",
            "",
            "",
        )],
        helm_records: vec![
            RecordView {
                namespace: "flux-system".into(),
                name: "sh.helm.release.v1.flux-operator.v1".into(),
                release: "flux-operator".into(),
                status: "deployed".into(),
            },
            RecordView {
                namespace: "flux-system".into(),
                name: "sh.helm.release.v1.flux-instance.v2".into(),
                release: "flux-instance".into(),
                status: String::new(),
            },
        ],
        helm_records_note: "2 more in namespaces you may not list".into(),
        changes: vec!["FluxInstance flux-system/flux: Helm's labels removed".into()],
        keeps: vec!["Deployment flux-system/flux-operator as it runs".into()],
        rollout: true,
        rollout_reason: "source-controller's image changes".into(),
        policy: "platform generation 3".into(),
        violations: vec![
            ViolationView {
                field: "spec.distribution.version".into(),
                message: "spec.distribution.version \"2.x\" is outside \">=2.7\"".into(),
            },
            ViolationView {
                field: "spec.distribution.registry".into(),
                message: "spec.distribution.registry is not allowed".into(),
            },
        ],
        refusals: vec!["the controllers would roll out (--allow-rollout)".into()],
        instance: "apiVersion: fluxcd.controlplane.io/v1\nkind: FluxInstance".into(),
        cleanup: vec!["kubectl -n flux-system delete secret -l owner=helm".into()],
        adopted: false,
        ignored: vec![object("Deployment", "apps", "helm-controller", "", "")],
        marks: vec![
            "ClusterRole flux-edit: marked".into(),
            "Namespace flux-system: to mark".into(),
        ],
        hidden: vec!["1 Deployment".into()],
    }
}

#[test]
fn the_plan_shows_every_section_in_order() {
    let text = render_plan(&full(), Style { color: true });
    assert_eq!(
        Style::shown(&text),
        "\
flux-operator v0.58.1 from Helm release flux-operator

KIND           OBJECT                          VERSION   HELM RELEASE    FIELD MANAGERS
Deployment     flux-system/flux-operator       v0.58.1   flux-operator   helm,kubectl
FluxInstance   flux-system/flux                2.x       flux-instance   helm,kubectl
Deployment     flux-system/source-controller   -         -               -

Refused:
  the controllers would roll out (--allow-rollout)

Not shown (you may not read them):
  1 Deployment

Ignored (named like Flux's, outside the operator namespace; anyone who administers their namespace can create one):
  Deployment apps/helm-controller

Changes:
  FluxInstance flux-system/flux: Helm's labels removed

Keeps:
  Deployment flux-system/flux-operator as it runs

Kept from Helm (helm.sh/resource-policy: keep, so helm uninstall or upgrade of the old release leaves them):
  ClusterRole flux-edit: marked
  Namespace flux-system: to mark

Rollout: <red>yes: source-controller's image changes</>
Policy: platform generation 3: 2 field(s) outside it, left running as they are
  <red>spec.distribution.version \"2.x\" is outside \">=2.7\"</>
  <red>spec.distribution.registry is not allowed</>

Helm release records (left in place; nothing reads them once adopted):
  flux-system/sh.helm.release.v1.flux-operator.v1 (flux-operator, deployed)
  flux-system/sh.helm.release.v1.flux-instance.v2 (flux-instance, -)

Helm release records: 2 more in namespaces you may not list

Remove them with:
  kubectl -n flux-system delete secret -l owner=helm

<red>Do not `helm uninstall` these releases before `kubectl tenantflux adopt apply` marked their objects: Helm deletes what its release holds, flux-operator included.</>

FluxInstance to create:
  apiVersion: fluxcd.controlplane.io/v1
  kind: FluxInstance
"
    );
}

#[test]
fn the_plan_says_no_rollout_a_complying_instance_and_safe_cleanups() {
    let plan = PlanView {
        case: "helm".into(),
        rollout: false,
        violations: Vec::new(),
        marks: vec!["ClusterRole flux-edit: marked".into()],
        ..full()
    };
    let text = render_plan(&plan, Style { color: true });
    let tail =
        &text[text.find("\nRollout").unwrap()..text.find("\nHelm release records (").unwrap()];
    assert_eq!(
        tail,
        "\nRollout: no: no Flux controller Deployment is re-rendered\nPolicy: platform generation 3: the FluxInstance complies\n"
    );
    assert!(
        text.contains("\n\nSafe cleanups: delete the records (above), or `helm uninstall` the releases: Helm keeps every object marked above.\n\nFluxInstance to create:\n"),
        "{text}"
    );
    let unheld = PlanView {
        policy: String::new(),
        ..plan
    };
    assert!(render_plan(&unheld, Style::PLAIN).contains("\nPolicy: none held\n"));
}

#[test]
fn a_plan_with_nothing_to_adopt_is_its_summary() {
    let none = PlanView {
        summary: "no Flux runs here".into(),
        ..PlanView::from(pb::AdoptionPlan {
            case: "none".into(),
            ..Default::default()
        })
    };
    assert_eq!(render_plan(&none, Style::PLAIN), "no Flux runs here\n");
}
