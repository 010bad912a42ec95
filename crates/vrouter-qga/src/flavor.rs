//! Which router OS runs in the guest (VyOS or DozenOS), and whether its
//! router service has finished starting.
//!
//! The flavor comes from the os-release(5) `ID`. `guest-get-osinfo` returns
//! it in one round trip with no process to start and poll, so it is asked
//! first; when the agent refuses that command (disabled with `-b`, or an
//! agent too old), the file itself is read through the agent.

use crate::agent::Agent;
use crate::constants::{OS_RELEASE_PATH, SYSTEMCTL_PATH};
use crate::error::QgaError;
use crate::exec::{ExecRequest, PollOptions};
use crate::transport::Transport;

/// A guest router OS the operator knows how to configure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GuestFlavor {
    /// VyOS (`ID=vyos`).
    Vyos,
    /// DozenOS (`ID=dozenos`), a VyOS derivative with the same vbash and
    /// commit semantics but its own service name.
    DozenOs,
}

impl GuestFlavor {
    /// Maps an os-release `ID`. An unknown id is an error rather than a
    /// guess: the wrong service name would make readiness checks wait for
    /// a unit that does not exist.
    pub fn from_os_id(id: &str) -> Result<Self, QgaError> {
        match id {
            "vyos" => Ok(GuestFlavor::Vyos),
            "dozenos" => Ok(GuestFlavor::DozenOs),
            other => Err(QgaError::UnknownFlavor { id: other.to_owned() }),
        }
    }

    pub fn os_id(self) -> &'static str {
        match self {
            GuestFlavor::Vyos => "vyos",
            GuestFlavor::DozenOs => "dozenos",
        }
    }

    /// The oneshot unit whose completion means the router accepts config
    /// (spec §2.2 `CheckReady`: its `SubState` reads `exited`).
    pub fn router_service(self) -> &'static str {
        match self {
            GuestFlavor::Vyos => "vyos-router.service",
            GuestFlavor::DozenOs => "dozenos-router.service",
        }
    }
}

/// The `SubState` a finished oneshot unit reports.
pub const SUBSTATE_EXITED: &str = "exited";

/// The `ID` of an os-release(5) file: the last `ID=` line wins, as with
/// shell sourcing, and one level of single or double quotes is removed.
pub fn os_release_id(contents: &str) -> Option<String> {
    contents
        .lines()
        .filter_map(|line| line.trim().strip_prefix("ID="))
        .next_back()
        .map(unquote)
        .filter(|id| !id.is_empty())
}

fn unquote(value: &str) -> String {
    let value = value.trim();
    for quote in ['"', '\''] {
        if let Some(inner) = value.strip_prefix(quote).and_then(|v| v.strip_suffix(quote)) {
            return inner.to_owned();
        }
    }
    value.to_owned()
}

/// `<systemctl> show -p SubState --value <unit>`: prints only the substate.
pub fn service_substate_request(systemctl: &str, unit: &str) -> ExecRequest {
    ExecRequest::new(systemctl).args(["show", "-p", "SubState", "--value", unit])
}

impl<T: Transport> Agent<T> {
    /// The guest's os-release `ID`, from `guest-get-osinfo`, or from
    /// `/etc/os-release` when the agent refuses that command.
    pub async fn os_id(&self) -> Result<String, QgaError> {
        self.os_id_from(OS_RELEASE_PATH).await
    }

    /// [`Agent::os_id`] with the fallback file at `os_release_path` (a seam
    /// for tests, which must not depend on the host's own file).
    pub async fn os_id_from(&self, os_release_path: &str) -> Result<String, QgaError> {
        match self.os_info().await {
            Ok(info) => info.id.ok_or(QgaError::NoOsId {
                source_name: "guest-get-osinfo",
            }),
            Err(QgaError::Agent { error, .. }) => {
                tracing::debug!(%error, "guest-get-osinfo refused; reading os-release instead");
                let contents = self.read_file(os_release_path).await?;
                os_release_id(&String::from_utf8_lossy(&contents)).ok_or(QgaError::NoOsId {
                    source_name: "os-release",
                })
            }
            Err(other) => Err(other),
        }
    }

    /// The guest's [`GuestFlavor`].
    pub async fn flavor(&self) -> Result<GuestFlavor, QgaError> {
        GuestFlavor::from_os_id(&self.os_id().await?)
    }

    /// The `SubState` of `unit` in the guest (e.g. `exited`, `running`).
    pub async fn service_substate(&self, unit: &str, poll: PollOptions) -> Result<String, QgaError> {
        self.service_substate_via(SYSTEMCTL_PATH, unit, poll).await
    }

    /// [`Agent::service_substate`] with another `systemctl` (a seam for
    /// tests on machines without systemd).
    pub async fn service_substate_via(
        &self,
        systemctl: &str,
        unit: &str,
        poll: PollOptions,
    ) -> Result<String, QgaError> {
        let request = service_substate_request(systemctl, unit);
        let output = self.run(&request, poll).await?;
        if !output.success() {
            return Err(QgaError::GuestCommandFailed {
                command: format!("{} {}", request.path, request.args.join(" ")),
                status: output.status,
                stderr: output.stderr_text().trim().to_owned(),
            });
        }
        Ok(output.stdout_text().trim().to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_release_ids() {
        let cases = [
            ("ID=vyos\nNAME=\"VyOS\"\n", Some("vyos")),
            ("NAME=DozenOS\nID=\"dozenos\"\n", Some("dozenos")),
            ("ID='debian'\n", Some("debian")),
            ("  ID=vyos  \n", Some("vyos")),
            ("ID_LIKE=debian\nVERSION_ID=1.4\n", None),
            ("ID=\n", None),
            ("ID=debian\nID=vyos\n", Some("vyos")),
            ("", None),
        ];
        for (contents, expected) in cases {
            assert_eq!(os_release_id(contents).as_deref(), expected, "{contents:?}");
        }
    }

    #[test]
    fn flavors_round_trip_and_unknown_ids_are_errors() {
        for flavor in [GuestFlavor::Vyos, GuestFlavor::DozenOs] {
            assert_eq!(GuestFlavor::from_os_id(flavor.os_id()).unwrap(), flavor);
        }
        assert_eq!(GuestFlavor::Vyos.router_service(), "vyos-router.service");
        assert_eq!(GuestFlavor::DozenOs.router_service(), "dozenos-router.service");
        let error = GuestFlavor::from_os_id("VyOS").unwrap_err();
        assert_eq!(
            error.to_string(),
            "unknown guest OS id \"VyOS\": expected \"vyos\" or \"dozenos\""
        );
    }

    #[test]
    fn substate_request_asks_for_the_value_only() {
        let request = service_substate_request(SYSTEMCTL_PATH, "vyos-router.service");
        assert_eq!(request.path, "/usr/bin/systemctl");
        assert_eq!(
            request.args,
            ["show", "-p", "SubState", "--value", "vyos-router.service"]
        );
        assert!(request.capture_output);
    }
}
