//! A policy and a FluxInstance spec, as two YAML documents separated by a line `---`: when the
//! policy parses, evaluating any spec against it (on any day) and rendering it into the
//! ValidatingAdmissionPolicy never panic, and every violation names a field under `spec`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tenantflux_core::policy::{Policy, admission::render};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (policy, spec) = text.split_once("\n---\n").unwrap_or((text, "{}"));
    let Ok(policy) = Policy::parse(policy) else {
        return;
    };
    let Ok(spec) = tenantflux_core::yaml::from_str::<serde_json::Value>(spec) else {
        return;
    };
    // Days from the spec's length, so the fuzzer also reaches both sides of a deadline and
    // the extremes of the calendar.
    let day = match spec.to_string().len() % 4 {
        0 => tenantflux_core::policy::today(),
        1 => i64::MIN,
        2 => i64::MAX,
        _ => 20_000,
    };
    let evaluation = policy.evaluate_at(&spec, day);
    for violation in &evaluation.violations {
        assert!(
            violation.field.starts_with("spec"),
            "a violation names a field outside spec: {violation:?}"
        );
    }
    let _ = render(&policy, day);
});
