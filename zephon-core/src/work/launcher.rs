//! [`Launcher`]: a rank's place in a data-parallel run, read from the
//! variables the usual launchers export.

use crate::error::{Error, Result};
use std::fmt;

/// Which launcher's variables a [`Launcher`] was read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LauncherKind {
    /// `torchrun` (and other PyTorch-style launchers): `RANK`, `WORLD_SIZE`,
    /// `LOCAL_RANK`.
    Torchrun,
    /// Slurm's `srun`: `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`.
    Slurm,
}

impl LauncherKind {
    /// The names of the rank, world-size and local-rank variables.
    pub fn variables(self) -> [&'static str; 3] {
        match self {
            LauncherKind::Torchrun => ["RANK", "WORLD_SIZE", "LOCAL_RANK"],
            LauncherKind::Slurm => ["SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"],
        }
    }
}

/// This process's rank and the world size, as a launcher exported them.
/// Pass it to [`WorkSourceBuilder::launcher`](super::WorkSourceBuilder::launcher),
/// or let [`ranks_from_env`](super::WorkSourceBuilder::ranks_from_env) read it.
///
/// `torchrun`'s variables win over Slurm's: a job that starts `torchrun`
/// under `srun` has both, and the ranks torchrun numbers are the ones that
/// train.
///
/// ```
/// use zephon_core::work::{Launcher, LauncherKind};
/// let env = [("RANK", "3"), ("WORLD_SIZE", "8"), ("LOCAL_RANK", "1")];
/// let lookup = |k: &str| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string());
/// let l = Launcher::from_lookup(lookup)?.unwrap();
/// assert_eq!((l.rank, l.world_size, l.local_rank), (3, 8, Some(1)));
/// assert_eq!(l.kind, LauncherKind::Torchrun);
/// // No launcher variables: a plain single process.
/// assert_eq!(Launcher::from_lookup(|_| None)?, None);
/// # Ok::<(), zephon_core::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Launcher {
    /// This process's rank, below `world_size`.
    pub rank: u32,
    /// Number of ranks.
    pub world_size: u32,
    /// Rank within the node, where the launcher says (reported only: the
    /// data pipeline does not need it).
    pub local_rank: Option<u32>,
    /// Which launcher's variables these are.
    pub kind: LauncherKind,
}

impl fmt::Display for Launcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [rank, world, local] = self.kind.variables();
        write!(
            f,
            "rank {} of {} ({rank}, {world}",
            self.rank, self.world_size
        )?;
        if let Some(l) = self.local_rank {
            write!(f, "; {local} {l}")?;
        }
        write!(f, ")")
    }
}

impl Launcher {
    /// Reads the process environment; `Ok(None)` when no launcher variables
    /// are set. See [`from_lookup`](Self::from_lookup) for the rules.
    pub fn from_env() -> Result<Option<Launcher>> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads the variables through `lookup` (a name to its value, `None`
    /// when unset): `RANK`/`WORLD_SIZE` if either is set, else
    /// `SLURM_PROCID`/`SLURM_NTASKS` if either is set, else `Ok(None)`.
    ///
    /// A variable of the pair missing, a value that is not a number, a world
    /// size of 0 or a rank not below the world size is an
    /// [`Error::Config`] naming the variable.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Option<Launcher>> {
        for kind in [LauncherKind::Torchrun, LauncherKind::Slurm] {
            let [rank_var, world_var, local_var] = kind.variables();
            let (rank, world) = (lookup(rank_var), lookup(world_var));
            if rank.is_none() && world.is_none() {
                continue;
            }
            let number = |name: &str, value: Option<String>| -> Result<u32> {
                let value = value.ok_or_else(|| {
                    let other = if name == rank_var {
                        world_var
                    } else {
                        rank_var
                    };
                    Error::config(name, format!("is not set, but {other} is"))
                })?;
                value
                    .trim()
                    .parse::<u32>()
                    .map_err(|_| Error::config(name, format!("`{value}` is not a whole number")))
            };
            let rank = number(rank_var, rank)?;
            let world_size = number(world_var, world)?;
            if world_size == 0 {
                return Err(Error::config(world_var, "is 0; a run has at least 1 rank"));
            }
            if rank >= world_size {
                return Err(Error::config(
                    rank_var,
                    format!("{rank} is not below {world_var} {world_size}"),
                ));
            }
            let local_rank = match lookup(local_var) {
                Some(v) => Some(number(local_var, Some(v))?),
                None => None,
            };
            return Ok(Some(Launcher {
                rank,
                world_size,
                local_rank,
                kind,
            }));
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(env: &[(&str, &str)]) -> Result<Option<Launcher>> {
        Launcher::from_lookup(|k| {
            env.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
    }

    fn refused(env: &[(&str, &str)], var: &str, says: &str) {
        let e = read(env).unwrap_err().to_string();
        assert!(e.contains(&format!("`{var}`")), "{env:?}: {e}");
        assert!(e.contains(says), "{env:?}: `{e}` does not say `{says}`");
    }

    #[test]
    fn torchrun_and_slurm_variables_are_read() {
        let l = read(&[("RANK", "0"), ("WORLD_SIZE", "2")])
            .unwrap()
            .unwrap();
        assert_eq!((l.rank, l.world_size, l.local_rank), (0, 2, None));
        assert_eq!(l.to_string(), "rank 0 of 2 (RANK, WORLD_SIZE)");
        let l = read(&[
            ("SLURM_PROCID", "5"),
            ("SLURM_NTASKS", "16"),
            ("SLURM_LOCALID", "1"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!((l.rank, l.world_size, l.local_rank), (5, 16, Some(1)));
        assert_eq!(l.kind, LauncherKind::Slurm);
        assert_eq!(
            l.to_string(),
            "rank 5 of 16 (SLURM_PROCID, SLURM_NTASKS; SLURM_LOCALID 1)"
        );
        // torchrun started under srun: torchrun's ranks train.
        let l = read(&[
            ("RANK", "3"),
            ("WORLD_SIZE", "4"),
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "1"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            (l.rank, l.world_size, l.kind),
            (3, 4, LauncherKind::Torchrun)
        );
        assert_eq!(read(&[("LOCAL_RANK", "0")]).unwrap(), None);
    }

    #[test]
    fn bad_values_are_errors_naming_the_variable() {
        refused(&[("RANK", "one"), ("WORLD_SIZE", "2")], "RANK", "`one`");
        refused(&[("RANK", "1"), ("WORLD_SIZE", "-2")], "WORLD_SIZE", "`-2`");
        refused(&[("RANK", "2"), ("WORLD_SIZE", "2")], "RANK", "not below");
        refused(&[("RANK", "0"), ("WORLD_SIZE", "0")], "WORLD_SIZE", "is 0");
        refused(&[("RANK", "0")], "WORLD_SIZE", "not set, but RANK is");
        refused(&[("SLURM_NTASKS", "4")], "SLURM_PROCID", "not set");
        refused(
            &[("RANK", "0"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "x")],
            "LOCAL_RANK",
            "`x`",
        );
        refused(
            &[("SLURM_PROCID", "9"), ("SLURM_NTASKS", "4")],
            "SLURM_PROCID",
            "9 is not below SLURM_NTASKS 4",
        );
    }
}
