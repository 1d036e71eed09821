//! One module per subcommand.

pub mod build_index;
pub mod demo;
pub mod flags;
pub mod inspect;
pub mod prepare;
pub mod ranks;
pub mod run;
pub mod timing;
