//! The integration tests: one binary, a module per area, each run on its own by `tests/run`
//! (one process per module, so a module's tests share a process and the suite's cluster only
//! with each other). Run one scenario with `tests/run NAME` (see docs/testing.md).

mod adopt;
mod agent;
mod bad_input;
mod cozystack;
mod dashboard;
mod discovered_kinds;
mod faults;
mod fleet;
mod fleet_dashboard;
mod flux_cli;
mod flux_minor;
mod image;
mod inspect;
mod logs;
mod operator_install;
mod packaging;
mod policy;
mod policy_pull;
mod release;
mod releases;
mod security;
mod security_api;
mod security_policy;
mod smoke;
mod upgrade;
mod upgrade_races;
mod workloads;
