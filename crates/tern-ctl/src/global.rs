//! The options every ternctl command takes, before or after its subcommand
//! (`ternctl --server URL agents status` and `ternctl agents status --server URL` alike):
//! how to reach ternd, the product the command is about, and the output format.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

/// Output formats. `text` is for people (tables; resources as YAML); the planner
/// prints resources, so it reads `text` as YAML (`plan find`: as JSON, like ternd).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Tables and sentences (resources as YAML).
    #[default]
    Text,
    /// JSON, as ternd answers.
    Json,
    /// YAML.
    Yaml,
}

/// Global options: valid on every command, before or after the subcommand.
#[derive(Args, Clone, Debug)]
#[command(next_help_heading = "Global options")]
pub struct Global {
    /// ternd's URL (API commands).
    #[arg(
        long,
        env = "TERN_SERVER",
        global = true,
        default_value = "https://127.0.0.1:3025",
        value_name = "URL"
    )]
    pub server: String,
    /// File holding the API token (otherwise env TERN_TOKEN holds the token itself).
    #[arg(long, env = "TERN_TOKEN_FILE", global = true, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// PEM CA certificate to trust for ternd's TLS certificate (when a private CA
    /// signed it).
    #[arg(long, env = "TERN_CA_CERT", global = true, value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,
    /// Output format [default: text; plan: yaml, plan find: json].
    #[arg(short = 'o', long, global = true, value_enum, value_name = "FORMAT")]
    pub output: Option<Output>,
    /// The product the command is about (default: env TERN_PRODUCT, else the agent):
    /// resources, agents commands, inventory ls. `agents freeze` and `inventory pin`
    /// take it several times and hold only the products named (every product
    /// without it; TERN_PRODUCT never narrows them).
    #[arg(long = "product", global = true, value_name = "PRODUCT")]
    pub products: Vec<String>,
    /// Whether TERN_PRODUCT names the product when `--product` does not (not for
    /// `ternctl updater --updater-server`, whose ternd serves the updater as its agent).
    #[arg(skip = true)]
    pub product_env: bool,
}

/// The environment variable naming the product when `--product` is not given.
pub const PRODUCT_ENV: &str = "TERN_PRODUCT";

impl Global {
    /// The output format asked for, text by default.
    pub fn output(&self) -> Output {
        self.output.unwrap_or_default()
    }

    /// The one product a command is about: `--product` (once), else TERN_PRODUCT;
    /// `None`: the agent.
    pub fn product(&self) -> anyhow::Result<Option<String>> {
        match self.products.as_slice() {
            [] if !self.product_env => Ok(None),
            [] => Ok(std::env::var(PRODUCT_ENV)
                .ok()
                .map(|p| p.trim().to_string())
                .filter(|p| !p.is_empty())),
            [one] => Ok(Some(one.clone())),
            several => anyhow::bail!(
                "--product is given {} times: only `agents freeze` and `inventory pin` take several products",
                several.len()
            ),
        }
    }
}
