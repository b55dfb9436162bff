//! Any text as a policy document and as a signed policy envelope: parsing never panics, and a
//! policy that parses prints as YAML that parses back to the same policy (what `policy show`
//! prints and the agent stores must be readable again).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tenantflux_core::policy::{Policy, signing::SignedPolicy};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(policy) = Policy::parse(text) {
        let again = Policy::parse(&policy.to_yaml())
            .unwrap_or_else(|err| panic!("{policy} prints as YAML it cannot read: {err}"));
        assert_eq!(again, policy, "the policy changed through its YAML");
    }
    if let Ok(signed) = SignedPolicy::parse(text) {
        let again = SignedPolicy::parse(&signed.to_yaml()).expect("a parsed envelope re-parses");
        assert_eq!(again.to_yaml(), signed.to_yaml());
    }
});
