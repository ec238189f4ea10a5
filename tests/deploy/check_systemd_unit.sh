#!/usr/bin/env bash
# Checks deploy/systemd: `systemd-analyze verify` on the unit with ExecStart pointed at
# the built slidedpd (verify needs an existing executable) must pass without a warning,
# the unit must keep the settings the daemon relies on, and every --flag=value that the
# unit, its /etc/default file and the Dockerfile's ENTRYPOINT pass must be a flag of
# slidedpd.
#   check_systemd_unit.sh SOURCE_DIR SLIDEDPD
# Exit 77 (ctest: skipped) without systemd-analyze.
set -euo pipefail
src="$1"; slidedpd="$2"
unit="$src/deploy/systemd/slidedpd.service"
default="$src/deploy/systemd/slidedpd.default"
command -v systemd-analyze >/dev/null || { echo "systemd-analyze missing (Debian: systemd)"; exit 77; }
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT

sed "s|^ExecStart=/usr/local/bin/slidedpd |ExecStart=$slidedpd |" "$unit" > "$tmp/slidedpd.service"
grep -q "^ExecStart=$slidedpd " "$tmp/slidedpd.service" \
  || { echo "FAIL: ExecStart does not start /usr/local/bin/slidedpd"; exit 1; }
if ! systemd-analyze verify "$tmp/slidedpd.service" >"$tmp/out" 2>&1 || [[ -s "$tmp/out" ]]; then
  echo "FAIL: systemd-analyze verify:"; cat "$tmp/out"; exit 1
fi

fail=0
for setting in '^User=slidedp$' '^Group=slidedp$' '^StateDirectory=slidedp$' '^Restart=on-failure$' \
               '^LimitMEMLOCK=infinity$' '^ExecStart=/usr/local/bin/slidedpd --state_dir=/var/lib/slidedp '; do
  grep -q "$setting" "$unit" || { echo "FAIL: $unit lacks $setting"; fail=1; }
done
grep -q '^u slidedp ' "$src/deploy/systemd/slidedp.sysusers.conf" \
  || { echo "FAIL: slidedp.sysusers.conf does not create the user slidedp"; fail=1; }

help="$("$slidedpd" --helpfull 2>&1 || true)"
entrypoint="$(sed -n '/^ENTRYPOINT/,/]/p' "$src/deploy/docker/Dockerfile")"
[[ -n "$entrypoint" ]] || { echo "FAIL: deploy/docker/Dockerfile has no ENTRYPOINT"; fail=1; }
for flag in $( (grep -ho -- '--[a-z_]*=' "$unit" "$default"; grep -o -- '--[a-z_]*' <<<"$entrypoint") |
               tr -d '=' | sed 's/^--//' | sort -u); do
  grep -q -- "-$flag (" <<<"$help" || { echo "FAIL: slidedpd has no flag --$flag (used in deploy/)"; fail=1; }
done
[[ $fail -eq 0 ]] && echo "deploy/systemd: OK"
exit $fail
