//! `aloftctl adm upgrade`: the fleet's release, its updates, and starting one, as `oc adm
//! upgrade` shows and starts them (the same words where the meaning is the same).

use super::Usage;
use crate::client::Client;
use aloft_api::clusterversion::{self as cv, ClusterVersion};
use aloft_api::meta::find_condition;
use anyhow::{bail, Result};
use serde_json::{json, Value};

/// Where the one ClusterVersion lives.
pub const PATH: &str = "/apis/config.openshift.io/v1/clusterversions/version";

/// What `--to`/`--to-image` ask for.
pub struct Request<'a> {
    pub to: Option<&'a str>,
    pub to_image: Option<&'a str>,
    pub allow_explicit_upgrade: bool,
    pub allow_not_recommended: bool,
    pub force: bool,
}

async fn read(client: &Client) -> Result<ClusterVersion> {
    let reply = client.get(PATH).await?;
    if reply.code == 404 {
        bail!(
            "no ClusterVersion: create the object named \"version\" (config.openshift.io/v1) with spec.upstream, \
             spec.channel and spec.desiredUpdate (the release the fleet runs); see the README's \"Releases and the \
             update graph\""
        );
    }
    Ok(serde_json::from_value(reply.into_result()?)?)
}

/// Print the current release, the upstream and channel, and the updates the graph offers.
pub async fn show(client: &Client, include_not_recommended: bool) -> Result<()> {
    let cv = read(client).await?;
    print!("{}", describe(&cv, include_not_recommended));
    Ok(())
}

/// The text `show` prints, from a ClusterVersion.
pub fn describe(cv: &ClusterVersion, include_not_recommended: bool) -> String {
    let mut out = String::new();
    let status = cv.status.clone().unwrap_or_default();
    let cond = |t: &str| find_condition(&status.conditions, t).cloned();
    if let Some(p) = cond(cv::PROGRESSING).filter(|c| c.is_true()) {
        out.push_str(&format!("info: An update is in progress. {}\n\n", p.message));
    }
    if let Some(f) = cond(cv::FAILING).filter(|c| c.is_true()) {
        out.push_str(&format!("warning: {} ({})\n\n", f.message, f.reason));
    }
    if let Some(i) = cond(cv::INVALID).filter(|c| c.is_true()) {
        out.push_str(&format!("error: the desired update is ignored: {}\n\n", i.message));
    }
    match cond(cv::RELEASE_ACCEPTED) {
        Some(a) if a.status == "False" => {
            out.push_str(&format!("error: the desired update was not accepted ({}): {}\n\n", a.reason, a.message))
        }
        Some(a) if a.status == "Unknown" => {
            out.push_str(&format!("info: the desired update is not accepted yet ({}): {}\n\n", a.reason, a.message))
        }
        _ => {}
    }
    let completed = status.history.iter().find(|h| h.state == cv::COMPLETED).map(|h| h.version.as_str());
    match (completed, cv.current()) {
        (Some(v), _) => out.push_str(&format!("Cluster version is {v}\n\n")),
        (None, Some(d)) => out.push_str(&format!("No release has completed yet; the first is {}\n\n", d.version)),
        (None, None) => out.push_str("No release has been accepted yet: set spec.desiredUpdate\n\n"),
    }
    let or_unset = |s: &str| if s.is_empty() { "<none>".to_string() } else { s.to_string() };
    out.push_str(&format!("Upstream: {}\n", or_unset(&cv.spec.upstream)));
    out.push_str(&format!("Channel: {}\n", or_unset(&cv.spec.channel)));
    if cv.spec.automatic_updates.as_ref().is_some_and(|a| a.enabled) {
        // The threshold says why nothing is taken after a rollback.
        let newer_than = crate::controllers::cluster_version::newest_run(&status)
            .map(|v| format!(" newer than {v}, the newest release run,"))
            .unwrap_or_default();
        out.push_str(&format!(
            "Automatic updates: on (the newest recommended update{newer_than} is taken once a release completes)\n"
        ));
    }
    out.push('\n');
    if let Some(r) = cond(cv::RETRIEVED_UPDATES).filter(|c| !c.is_true()) {
        out.push_str(&format!(
            "warning: Cannot display available updates:\n  Reason: {}\n  Message: {}\n\n",
            r.reason, r.message
        ));
    }
    if status.available_updates.is_empty() {
        out.push_str("No updates available. You may still update to a specific release image with --to-image.\n");
    } else {
        out.push_str("Recommended updates:\n\n");
        let mut rows = vec![vec!["VERSION".to_string(), "IMAGE".to_string()]];
        rows.extend(status.available_updates.iter().map(|r| vec![r.version.clone(), r.image.clone()]));
        out.push_str(&table(&rows));
    }
    let not_recommended: Vec<_> = status
        .conditional_updates
        .iter()
        .filter(|c| find_condition(&c.conditions, cv::RECOMMENDED).is_none_or(|r| !r.is_true()))
        .collect();
    if !not_recommended.is_empty() {
        if include_not_recommended {
            out.push_str("\nSupported but not recommended updates:\n");
            for c in not_recommended {
                let r = find_condition(&c.conditions, cv::RECOMMENDED);
                out.push_str(&format!("\n  Version: {}\n  Image: {}\n", c.release.version, c.release.image));
                if let Some(r) = r {
                    out.push_str(&format!(
                        "  Recommended: {}\n  Reason: {}\n  Message: {}\n",
                        r.status, r.reason, r.message
                    ));
                }
            }
        } else {
            out.push_str(&format!(
                "\nAdditional updates which are not recommended for this fleet are available ({}); to see them, \
                 run the command again with --include-not-recommended.\n",
                not_recommended.len()
            ));
        }
    }
    out
}

fn table(rows: &[Vec<String>]) -> String {
    let width = rows.iter().map(|r| r[0].len()).max().unwrap_or(0) + 3;
    rows.iter().map(|r| format!("  {:width$}{}\n", r[0], r[1])).collect()
}

/// Set `spec.desiredUpdate`, after the checks `oc adm upgrade --to` makes on the client.
pub async fn start(client: &Client, req: &Request<'_>) -> Result<()> {
    let cv = read(client).await?;
    let status = cv.status.clone().unwrap_or_default();
    let desired = match (req.to, req.to_image) {
        (Some(v), None) => {
            if let Some(r) = status.available_updates.iter().find(|r| r.version == v) {
                json!({"version": r.version, "image": r.image})
            } else if let Some(c) = status.conditional_updates.iter().find(|c| c.release.version == v) {
                if !req.allow_not_recommended {
                    let why = find_condition(&c.conditions, cv::RECOMMENDED)
                        .map(|r| format!("{}: {}", r.reason, r.message))
                        .unwrap_or_default();
                    return Err(Usage(format!(
                        "the update to {v} is not recommended: {why}\nIf you are sure, run the command again with \
                         --allow-not-recommended."
                    ))
                    .into());
                }
                json!({"version": c.release.version, "image": c.release.image})
            } else if let Some(h) = status.history.iter().find(|h| h.version == v && !h.image.is_empty()) {
                // A release the fleet ran (a rollback, which the preconditions judge).
                json!({"version": h.version, "image": h.image})
            } else {
                // --force included: the CVO takes a version alone only from these lists or the
                // history, so the request would be Invalid; a release off them needs its image.
                let offered: Vec<&str> = status.available_updates.iter().map(|r| r.version.as_str()).collect();
                return Err(Usage(format!(
                    "{v} is not one of the available updates ({}); to update to a release the graph does not offer, \
                     give its image with --to-image and --allow-explicit-upgrade",
                    if offered.is_empty() { "none".to_string() } else { offered.join(", ") }
                ))
                .into());
            }
        }
        (version, Some(image)) => {
            if !req.allow_explicit_upgrade {
                return Err(Usage(
                    "--to-image updates to a release the graph may not offer: add --allow-explicit-upgrade".into(),
                )
                .into());
            }
            match version {
                Some(v) => json!({"version": v, "image": image}),
                None => json!({"image": image}),
            }
        }
        (None, None) => return Err(Usage("say which release: --to VERSION or --to-image IMAGE".into()).into()),
    };
    let mut desired = desired;
    if req.force {
        desired["force"] = json!(true);
    }
    // A merge patch keeps the fields it does not name: an earlier request's image or force
    // would stay and change what this one asks for. Nulls take them out.
    let mut patched = json!({"version": null, "image": null, "force": null});
    if let (Some(p), Some(d)) = (patched.as_object_mut(), desired.as_object()) {
        p.extend(d.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    let patch = json!({"spec": {"desiredUpdate": patched}});
    client.patch(PATH, "application/merge-patch+json", &patch).await?.into_result()?;
    let shown = desired.get("version").and_then(Value::as_str).or(desired.get("image").and_then(Value::as_str));
    println!("Requested update to {}", shown.unwrap_or("?"));
    Ok(())
}

/// Set `spec.channel` (empty: follow none), checked as `oc adm upgrade channel` checks it
/// against the channels the current release is in.
pub async fn channel(client: &Client, channel: &str, allow_explicit: bool) -> Result<()> {
    let cv = read(client).await?;
    if cv.spec.channel == channel {
        if channel.is_empty() {
            println!("info: the channel is already clear (no change)");
        } else {
            println!("info: the fleet is already in channel {channel:?} (no change)");
        }
        return Ok(());
    }
    for line in channel_check(&cv, channel, allow_explicit)? {
        eprintln!("{line}");
    }
    let value = if channel.is_empty() { Value::Null } else { json!(channel) };
    client.patch(PATH, "application/merge-patch+json", &json!({"spec": {"channel": value}})).await?.into_result()?;
    if !channel.is_empty() {
        println!("Changed the channel from {:?} to {channel:?}", cv.spec.channel);
    }
    Ok(())
}

/// Whether moving `cv` to `channel` is allowed, and the warnings to print if so.
fn channel_check(cv: &ClusterVersion, channel: &str, allow_explicit: bool) -> Result<Vec<String>> {
    let known: &[String] =
        cv.status.as_ref().and_then(|s| s.desired.as_ref()).map(|d| d.channels.as_slice()).unwrap_or(&[]);
    let version = cv.status.as_ref().and_then(|s| s.desired.as_ref()).map(|d| d.version.as_str()).unwrap_or("");
    let mut warnings = Vec::new();
    let listed = known.join(", ");
    if !known.is_empty() {
        if channel.is_empty() {
            if known.contains(&cv.spec.channel) && !allow_explicit {
                return Err(Usage(format!(
                    "you are asking to clear the update channel; the current channel {:?} is one of the available \
                     channels ({listed}), those of release {version}: pass --allow-explicit-channel to clear it",
                    cv.spec.channel
                ))
                .into());
            }
        } else if !known.iter().any(|c| c == channel) {
            if !allow_explicit {
                return Err(Usage(format!(
                    "{channel:?} is not one of the available channels ({listed}), those of release {version}; pass \
                     --allow-explicit-channel to set it anyway"
                ))
                .into());
            }
            warnings.push(format!(
                "warning: {channel:?} is not one of the available channels ({listed}), those of release {version}; \
                 setting it anyway (--allow-explicit-channel)"
            ));
        }
    } else if !channel.is_empty() {
        warnings.push(format!(
            "warning: no channel is known for the current release{}; {channel:?} cannot be checked, setting it anyway",
            if version.is_empty() { String::new() } else { format!(" {version}") }
        ));
    }
    if channel.is_empty() {
        warnings.push(format!(
            "warning: clearing the channel {:?}: the fleet will no longer be offered updates",
            cv.spec.channel
        ));
    }
    Ok(warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cv(v: Value) -> ClusterVersion {
        serde_json::from_value(v).expect("a ClusterVersion")
    }

    #[test]
    fn a_channel_is_checked_against_the_channels_of_the_current_release() {
        let at = |channel: &str, channels: Value| {
            cv(json!({"metadata": {"name": "version"}, "spec": {"channel": channel},
                "status": {"desired": {"version": "4.7.2", "image": "i", "channels": channels}}}))
        };
        let listed = at("stable-4.7", json!(["fast-4.7", "stable-4.7", "stable-4.8"]));
        assert!(channel_check(&listed, "stable-4.8", false).unwrap().is_empty());
        let e = channel_check(&listed, "stable-4.9", false).unwrap_err().to_string();
        assert_eq!(
            e,
            "\"stable-4.9\" is not one of the available channels (fast-4.7, stable-4.7, stable-4.8), those of \
             release 4.7.2; pass --allow-explicit-channel to set it anyway"
        );
        let w = channel_check(&listed, "stable-4.9", true).unwrap();
        assert!(
            w.len() == 1 && w[0].starts_with("warning: \"stable-4.9\" is not one of the available channels"),
            "{w:?}"
        );
        // Clearing a channel the release is in needs the flag; clearing one it is not in does not.
        let e = channel_check(&listed, "", false).unwrap_err().to_string();
        assert!(e.contains("the current channel \"stable-4.7\" is one of the available channels"), "{e}");
        let w = channel_check(&listed, "", true).unwrap();
        assert_eq!(w, ["warning: clearing the channel \"stable-4.7\": the fleet will no longer be offered updates"]);
        assert_eq!(channel_check(&at("other", json!(["stable-4.7"])), "", false).unwrap().len(), 1);
        // No channels known (a graph that lists none, or none fetched yet): set with a warning.
        let w = channel_check(&at("stable-4.7", json!([])), "stable-4.9", false).unwrap();
        assert_eq!(w, ["warning: no channel is known for the current release 4.7.2; \"stable-4.9\" cannot be checked, setting it anyway"]);
    }

    #[test]
    fn shows_the_release_the_updates_and_why_some_are_held_back() {
        let c = cv(json!({
            "metadata": {"name": "version"},
            "spec": {"upstream": "http://u/graph", "channel": "stable-1"},
            "status": {
                "desired": {"version": "1.1.0", "image": "i1"},
                "history": [{"state": "Completed", "version": "1.1.0", "image": "i1", "startedTime": "t"}],
                "availableUpdates": [{"version": "1.2.0", "image": "i2"}],
                "conditionalUpdates": [{
                    "release": {"version": "1.3.0", "image": "i3"},
                    "risks": [{"name": "Bad", "message": "breaks", "matchingRules": [{"type": "Always"}]}],
                    "conditions": [{"type": "Recommended", "status": "False", "reason": "Bad", "message": "breaks"}],
                }],
                "conditions": [{"type": "RetrievedUpdates", "status": "True"}],
            },
        }));
        let text = describe(&c, false);
        assert!(text.starts_with("Cluster version is 1.1.0\n"), "{text}");
        assert!(text.contains("Channel: stable-1\n\n"), "{text}");
        let mut auto = c.clone();
        auto.spec.automatic_updates = Some(cv::AutomaticUpdates { enabled: true });
        let said = describe(&auto, false);
        assert!(
            said.contains("Channel: stable-1\nAutomatic updates: on (the newest recommended update newer than"),
            "{said}"
        );
        assert!(text.contains("  VERSION   IMAGE\n  1.2.0     i2\n"), "{text}");
        assert!(text.contains("not recommended for this fleet are available (1)"), "{text}");
        assert!(!text.contains("1.3.0"), "{text}");
        let all = describe(&c, true);
        assert!(
            all.contains("Version: 1.3.0\n  Image: i3\n  Recommended: False\n  Reason: Bad\n  Message: breaks"),
            "{all}"
        );
    }

    #[test]
    fn says_why_updates_cannot_be_shown() {
        let c = cv(json!({
            "metadata": {"name": "version"},
            "status": {"conditions": [{"type": "RetrievedUpdates", "status": "False", "reason": "NoUpstream",
                "message": "No upstream server has been set to retrieve updates."}]},
        }));
        let text = describe(&c, false);
        assert!(text.contains("No release has been accepted yet"), "{text}");
        assert!(text.contains("Upstream: <none>"), "{text}");
        assert!(text.contains("Reason: NoUpstream"), "{text}");
        assert!(text.contains("No updates available."), "{text}");
    }

    #[test]
    fn says_a_requested_release_is_being_retrieved_or_was_refused() {
        let with = |status: &str, reason: &str, message: &str| {
            describe(
                &cv(json!({"metadata": {"name": "version"}, "status": {"conditions": [
                    {"type": "ReleaseAccepted", "status": status, "reason": reason, "message": message}]}})),
                false,
            )
        };
        let waiting =
            with("Unknown", "RetrievePayload", "Retrieving and verifying payload version=\"1.1.0\" image=\"i\"");
        assert!(
            waiting.starts_with(
                "info: the desired update is not accepted yet (RetrievePayload): Retrieving and verifying payload version=\"1.1.0\""
            ),
            "{waiting}"
        );
        let refused = with("False", "RetrievePayload", "Retrieving payload failed version=\"1.1.0\"");
        assert!(refused.starts_with("error: the desired update was not accepted (RetrievePayload)"), "{refused}");
        assert!(!with("True", "PayloadLoaded", "Payload loaded").contains("the desired update"));
    }
}
