//! The checks, one module per group of the issue.

pub mod addr;
pub mod create;
pub mod cycles;
pub mod hold;
pub mod invalid;
pub mod limits;
pub mod masks;
pub mod mcast;
pub mod query;
pub mod values;
pub mod walk;
