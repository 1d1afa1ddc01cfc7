#!/usr/bin/env python3
"""The two-device walkthrough of the Topic/Note sample, driven through the `sharesync` CLI.

Node A (the owner) and node B (the participant) are two running `sharesync run` daemons. This script
only talks to them through the CLI (`--home DIR --json`), so it works wherever the CLI can reach each
node's control socket (`DIR/control.sock`): two local processes (demo/run.sh), two network namespaces
(demo/netns.sh) or two containers whose homes are volumes shared with this one (docker-compose.yml).
It does not start or stop the daemons: whoever started them does.

Steps (as in Apple's "Sharing CloudKit Data with Other iCloud Users" sample):
  1. A creates a zone and a topic; A shares the topic (read-write) and invites B.
  2. B accepts the URL; the topic and its zone appear in B's shared database.
  3. A adds a note under the topic and it reaches B; B adds a note and it reaches A.
  4. A switches B to read-only, and B's next write is refused.
  5. B leaves, and the zone disappears from B's shared database.
  6. A shares again and B accepts; A stops sharing, and B's zone is purged.

Each step prints what happened and how long the change took to arrive. Exit status: 0 when every
expected result appeared in time, 1 when one did not (or a command failed unexpectedly), 2 on bad usage.
Only the Python 3 standard library is used.
"""

import argparse
import json
import os
import subprocess
import sys
import time
import uuid


class WalkthroughFailed(Exception):
    """An expected result did not appear, or a command did something unexpected."""


class CommandFailed(WalkthroughFailed):
    def __init__(self, node, args, status, stdout, stderr):
        self.status = status
        self.stdout = stdout
        self.stderr = stderr
        super().__init__(
            f"node {node}: `sharesync {' '.join(args)}` exited {status}: {stderr.strip() or stdout.strip()}")


class Node:
    """One node, reached through the CLI and its home's control socket."""

    def __init__(self, label, binary, home, command_timeout):
        self.label = label
        self.binary = binary
        self.home = home
        self.command_timeout = command_timeout
        self.user_record_name = None

    def run(self, *args):
        """Runs `sharesync ARGS --home HOME --json`; returns (status, stdout, stderr)."""
        argv = [self.binary, *args, "--home", self.home, "--json"]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=self.command_timeout,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise WalkthroughFailed(
                f"node {self.label}: `sharesync {' '.join(args)}` did not finish within {self.command_timeout} s")
        return done.returncode, done.stdout, done.stderr

    def json(self, *args):
        """Runs a command that must succeed and returns its parsed JSON output."""
        status, stdout, stderr = self.run(*args)
        if status != 0:
            raise CommandFailed(self.label, args, status, stdout, stderr)
        try:
            return json.loads(stdout) if stdout.strip() else None
        except json.JSONDecodeError as error:
            raise WalkthroughFailed(
                f"node {self.label}: `sharesync {' '.join(args)}` printed no JSON ({error}): {stdout[:300]!r}")


# --- Reading the CLI's JSON without depending on its exact shape -------------------------------------

def records_in(value):
    """Every record dictionary (it has recordName and recordType) anywhere in a JSON value."""
    if isinstance(value, dict):
        if isinstance(value.get("recordName"), str) and isinstance(value.get("recordType"), str):
            yield value
        for child in value.values():
            yield from records_in(child)
    elif isinstance(value, list):
        for child in value:
            yield from records_in(child)


def zone_names_in(value):
    """Every zone name (a `zoneName` string) anywhere in a JSON value."""
    names = set()
    if isinstance(value, dict):
        if isinstance(value.get("zoneName"), str):
            names.add(value["zoneName"])
        for child in value.values():
            names |= zone_names_in(child)
    elif isinstance(value, list):
        for child in value:
            names |= zone_names_in(child)
    return names


def same_user(one, other):
    """User record names compare with or without their leading underscore."""
    return bool(one) and bool(other) and one.lstrip("_") == other.lstrip("_")


def record_names(records):
    return {record["recordName"] for record in records}


def modifier(record):
    """The user record name that last changed a record (the record dictionary's `modified`)."""
    modified = record.get("modified") or {}
    return modified.get("userRecordName")


def find(value, key):
    """The first value of `key` anywhere in a JSON value (depth first), or None."""
    if isinstance(value, dict):
        if key in value:
            return value[key]
        for child in value.values():
            found = find(child, key)
            if found is not None:
                return found
    elif isinstance(value, list):
        for child in value:
            found = find(child, key)
            if found is not None:
                return found
    return None


# --- The walkthrough ----------------------------------------------------------------------------------

class Walkthrough:
    def __init__(self, a, b, timeout, interval):
        self.a = a
        self.b = b
        self.timeout = timeout
        self.interval = interval
        # A fresh zone per run, so the walkthrough can run again against the same homes (compose volumes).
        self.zone = "Topics-" + uuid.uuid4().hex[:6]
        self.topic = "topic-1"
        self.timings = []
        # How B names A (`--owner`): the ownerName `accept` reports, else A's user record name.
        self.owner = None

    # Output

    def say(self, text):
        print(text, flush=True)

    def arrived(self, what, milliseconds):
        self.timings.append((what, milliseconds))
        self.say(f"      {what}: arrived in {milliseconds:.0f} ms")

    def wait_for(self, what, check):
        """Polls `check` every `interval` seconds until it returns a true value; returns the elapsed ms.

        Fails the walkthrough if the timeout passes first. Polling includes starting the CLI, so the
        times are upper bounds (a few tens of milliseconds per poll)."""
        start = time.monotonic()
        deadline = start + self.timeout
        last_error = None
        while True:
            try:
                if check():
                    return (time.monotonic() - start) * 1000
                last_error = None
            except CommandFailed as error:
                last_error = error
            if time.monotonic() >= deadline:
                detail = f" (last error: {last_error})" if last_error else ""
                raise WalkthroughFailed(f"timed out after {self.timeout:g} s waiting for: {what}{detail}")
            time.sleep(self.interval)

    # What each node sees

    def a_records(self):
        return list(records_in(self.a.json("record", "list", "--zone", self.zone)))

    def b_shared_zones(self):
        """The zone names in B's shared database that A owns."""
        zones = self.b.json("zone", "list", "--shared")
        names = set()
        for entry in zones if isinstance(zones, list) else []:
            if not isinstance(entry, dict):
                continue
            owner = entry.get("ownerName") or entry.get("ownerRecordName")
            if (owner is None or same_user(owner, self.a.user_record_name)) and isinstance(entry.get("zoneName"), str):
                names.add(entry["zoneName"])
        return names

    def b_records(self):
        """The records of the walkthrough's zone in B's shared database (empty if the zone is not there)."""
        if self.zone not in self.b_shared_zones():
            return []
        return list(records_in(
            self.b.json("record", "list", "--shared", "--owner", self.owner, "--zone", self.zone)))

    def b_save(self, *args):
        """A write by B into the shared zone; returns (status, stdout, stderr)."""
        return self.b.run("record", "save", "--shared", "--owner", self.owner, "--zone", self.zone,
                          *args)

    def b_participant_id(self):
        participants = self.a.json("share", "participants", "--zone", self.zone)
        for participant in participants:
            if participant.get("userRecordName") == self.b.user_record_name:
                return participant["participantID"], participant
        raise WalkthroughFailed(f"B ({self.b.user_record_name}) is not among the participants: {participants}")

    def invite_b(self):
        invited = self.a.json("share", "invite", "--zone", self.zone, "--user", self.b.user_record_name,
                              "--permission", "readWrite")
        url = invited.get("invitationURL") if isinstance(invited, dict) else None
        if url:
            return url
        # B was invited by user record name and is bound to it: re-added after leaving, it is pending again
        # with no one-time link, and the share's own URL lets it in.
        if not isinstance(invited, dict) or invited.get("acceptanceStatus") != "pending":
            raise WalkthroughFailed(f"share invite left B in an unexpected state: {invited}")
        url = find(self.a.json("share", "show", "--zone", self.zone), "url")
        if not url:
            raise WalkthroughFailed("share show printed no url")
        return url

    def accept(self, url):
        start = time.monotonic()
        accepted = self.b.json("accept", url, "--timeout", f"{self.timeout:g}")
        milliseconds = (time.monotonic() - start) * 1000
        owner = find(accepted, "ownerName")
        if owner and not same_user(owner, self.a.user_record_name):
            raise WalkthroughFailed(f"B accepted a share from {owner}, not from A ({self.a.user_record_name})")
        self.owner = owner or self.a.user_record_name
        return accepted, milliseconds

    # The steps

    def run(self):
        a, b = self.a, self.b
        a.user_record_name = find(a.json("status"), "userRecordName")
        b.user_record_name = find(b.json("status"), "userRecordName")
        if not a.user_record_name or not b.user_record_name:
            raise WalkthroughFailed("`sharesync status` printed no userRecordName")
        self.say(f"node A (owner):       {a.user_record_name}  home {a.home}")
        self.say(f"node B (participant): {b.user_record_name}  home {b.home}")
        start = time.monotonic()
        b.json("status")
        self.say(f"(one CLI round trip takes about {(time.monotonic() - start) * 1000:.0f} ms; arrival times "
                 f"include the poll that sees the change)")

        self.say(f"\n[1] A creates zone {self.zone} and a topic, shares the topic read-write and invites B")
        a.json("zone", "create", self.zone)
        a.json("record", "save", "--zone", self.zone, "--type", "Topic", "--name", self.topic,
               "--field", "name=string:A cool topic")
        share = a.json("share", "create", "--zone", self.zone, "--root", self.topic,
                       "--title", "A cool topic to share!")
        self.say(f"      share {share.get('shareName')} of {self.topic}: {share.get('url')}")
        url = self.invite_b()
        self.say(f"      invitation for B (readWrite): {url}")

        self.say("\n[2] B accepts the URL; the topic and its zone appear in B's shared database")
        accepted, ms = self.accept(url)
        self.say(f"      accept returned in {ms:.0f} ms: permission {find(accepted, 'permission')}, "
                 f"zones {sorted(zone_names_in(accepted))}")
        ms = self.wait_for(f"zone {self.zone} and {self.topic} in B's shared database",
                           lambda: self.topic in record_names(self.b_records()))
        self.arrived("topic and zone in B's shared database (after accept returned)", ms)

        self.say("\n[3] A adds a note under the topic; B adds a note; each reaches the other")
        a.json("record", "save", "--zone", self.zone, "--type", "Note", "--name", "note-from-a",
               "--parent", self.topic, "--field", "title=string:Note from A",
               "--field", f"topic=reference:{self.topic}")
        ms = self.wait_for("A's note in B's shared database",
                           lambda: "note-from-a" in record_names(self.b_records()))
        self.arrived("A's note on B", ms)

        # B's note has the topic as its parent (that is what puts it in the share) and, like A's, a
        # `topic` reference field.
        status, stdout, stderr = self.b_save("--type", "Note", "--name", "note-from-b", "--parent", self.topic,
                                             "--field", "title=string:Note from B",
                                             "--field", f"topic=reference:{self.topic}")
        if status != 0:
            raise CommandFailed("B", ("record", "save", "--shared", "…"), status, stdout, stderr)
        outcome = find(json.loads(stdout), "outcome") if stdout.strip() else None
        self.say(f"      B's save: {outcome or 'done'}")

        def note_from_b_on_a():
            for record in self.a_records():
                if record["recordName"] == "note-from-b":
                    return record
            return None

        ms = self.wait_for("B's note in A's private database", note_from_b_on_a)
        self.arrived("B's note on A", ms)
        by = modifier(note_from_b_on_a())
        if by and by != b.user_record_name:
            raise WalkthroughFailed(f"B's note on A was last modified by {by}, not by B ({b.user_record_name})")
        self.say(f"      on A, note-from-b was last modified by {by or '?'} (B)")

        self.say("\n[4] A switches B to read-only; B's next write is refused")
        participant_id, _ = self.b_participant_id()
        changed = a.json("share", "permission", "--zone", self.zone, "--participant", participant_id,
                         "--permission", "readOnly")
        if find(changed, "permission") != "readOnly":
            raise WalkthroughFailed(f"share permission did not report readOnly: {changed}")
        start = time.monotonic()
        refused = None
        attempt = 0
        # The owner checks every write against the share as it is now, so the first write after the change
        # is refused. A write that goes out while B is disconnected is only queued; keep trying briefly.
        while True:
            attempt += 1
            status, stdout, stderr = self.b_save("--type", "Note", "--name", f"note-refused-{attempt}",
                                                 "--parent", self.topic, "--field", "title=string:Refused")
            if status != 0:
                refused = (status, stderr.strip())
                break
            if time.monotonic() - start > self.timeout:
                raise WalkthroughFailed(f"B's writes were not refused within {self.timeout:g} s: {stdout.strip()}")
            time.sleep(self.interval)
        ms = (time.monotonic() - start) * 1000
        self.say(f"      B's write refused (exit {refused[0]}): {refused[1]}")
        if refused[0] != 65:
            raise WalkthroughFailed(f"B's write failed with exit {refused[0]}, not 65 (refused by the node)")
        self.arrived("read-only took effect for B's writes", ms)
        if any(r["recordName"].startswith("note-refused-") for r in self.a_records()):
            raise WalkthroughFailed("a refused write from B reached A's private database")

        self.say("\n[5] B leaves; the zone disappears from B's shared database")
        start = time.monotonic()
        b.json("leave", "--owner", self.owner, "--zone", self.zone)
        self.say(f"      leave returned in {(time.monotonic() - start) * 1000:.0f} ms")
        ms = self.wait_for(f"zone {self.zone} gone from B's shared database",
                           lambda: self.zone not in self.b_shared_zones())
        self.arrived("zone gone from B's shared database (after leave returned)", ms)

        def b_left():
            _, participant = self.b_participant_id()
            return participant.get("acceptanceStatus") == "removed"

        ms = self.wait_for("B shown as removed among A's participants", b_left)
        self.arrived("A sees B as removed", ms)

        self.say("\n[6] A shares again and B accepts; A stops sharing and B's zone is purged")
        url = self.invite_b()
        self.say(f"      B re-added (pending, readWrite); B accepts {url}")
        accepted, ms = self.accept(url)
        self.say(f"      accept returned in {ms:.0f} ms")
        expected = {self.topic, "note-from-a", "note-from-b"}
        ms = self.wait_for("the topic and both notes back in B's shared database",
                           lambda: expected <= record_names(self.b_records()))
        self.arrived("topic and notes back on B (after accept returned)", ms)
        a.json("share", "stop", "--zone", self.zone)
        ms = self.wait_for(f"zone {self.zone} purged from B's shared database",
                           lambda: self.zone not in self.b_shared_zones())
        self.arrived("stop sharing reached B, zone purged", ms)
        left = record_names(records_in(a.json("record", "list", "--zone", self.zone)))
        if not expected <= left:
            raise WalkthroughFailed(f"A's records went with the share: {sorted(left)}")
        self.say(f"      A keeps its records: {', '.join(sorted(left))}")

        self.say("\nwalkthrough passed; arrival times:")
        for what, milliseconds in self.timings:
            self.say(f"  {milliseconds:7.0f} ms  {what}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", default=os.environ.get("SHARESYNC_BIN", "sharesync"),
                        help="the sharesync binary (default: $SHARESYNC_BIN, else sharesync on PATH)")
    parser.add_argument("--a", required=True, metavar="HOME", help="node A's home (its daemon must be running)")
    parser.add_argument("--b", required=True, metavar="HOME", help="node B's home (its daemon must be running)")
    parser.add_argument("--timeout", type=float, default=float(os.environ.get("DEMO_TIMEOUT", "10")),
                        help="seconds to wait for each expected result (default: $DEMO_TIMEOUT, else 10)")
    parser.add_argument("--interval", type=float, default=0.02, help="seconds between polls (default 0.02)")
    args = parser.parse_args()

    # Each CLI call gets the time limit plus a margin (accept waits up to the time limit itself).
    command_timeout = args.timeout + 10
    walkthrough = Walkthrough(Node("A", args.bin, args.a, command_timeout), Node("B", args.bin, args.b, command_timeout),
                              args.timeout, args.interval)
    try:
        walkthrough.run()
    except WalkthroughFailed as error:
        print(f"\nwalkthrough FAILED: {error}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
