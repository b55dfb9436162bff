//! Conversions between the agent's domain types and `tenantflux_proto` that more than one
//! service needs; a conversion one service alone uses stays in that service's file.

// Times. The policy's signed claims, like every time the domain keeps, are unix seconds.

/// A unix time in seconds, as protobuf carries it.
pub fn timestamp(unix: i64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: unix,
        nanos: 0,
    }
}
