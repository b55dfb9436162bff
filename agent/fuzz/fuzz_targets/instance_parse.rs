//! Any text as a FluxInstance manifest (`instance apply -f`): the parser never panics, and a
//! manifest it accepts is the FluxInstance `flux` in the operator namespace with a spec object.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tenantflux_agent::instance::parse_manifest;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(manifest) = parse_manifest(text, "flux-system") {
        assert_eq!(manifest["kind"], "FluxInstance");
        assert_eq!(manifest["metadata"]["name"], "flux");
        assert_eq!(manifest["metadata"]["namespace"], "flux-system");
        assert!(manifest["spec"].is_object());
    }
});
