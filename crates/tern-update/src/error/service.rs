//! What is wrong with a service config (`service`), and the bounds it is checked against.

/// Why a service config is refused: the field and the rule it breaks.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigProblem {
    #[error("name is required")]
    NoName,
    #[error("{field} is required with manager: command")]
    MissingCommand { field: &'static str },
    #[error("pid_file or is_active is required with manager: command")]
    NoLivenessCheck,
    #[error(
        "health_timeout and health_interval must be positive seconds, at most {MAX_HEALTH_SECONDS}"
    )]
    HealthTimesNotPositive,
    #[error("backup_max_age_hours must be between 0 and {MAX_BACKUP_AGE_HOURS}")]
    BackupAgeOutOfRange,
    #[error("stable_ticks must be at least 1")]
    NoStableTicks,
}

/// The longest health timeout or interval (a day): far beyond any real agent's start,
/// and well inside what a `Duration` holds.
pub(crate) const MAX_HEALTH_SECONDS: f64 = 86_400.0;

/// The oldest backup age that can be set (a century).
pub(crate) const MAX_BACKUP_AGE_HOURS: f64 = 24.0 * 365.0 * 100.0;
