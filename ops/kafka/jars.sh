# Sourced by kafka.sh and connect.sh: the jars a pom names, fetched once with Maven into a
# cache, re-fetched when the pom changes (its checksum is the marker), safe with concurrent
# callers (a lock), never left half-fetched (a scratch dir swapped in).
#
#   fetch_jars POM LIBS_DIR WHAT   (die is the caller's: it names the script)

_pom_checksum() { sha256sum "$1" | cut -d' ' -f1; }

_jars_marker() { echo "$(dirname "$1")/fetched.sha256"; }

_jars_fetched() {
  local marker
  marker="$(_jars_marker "$2")"
  [[ -f "$marker" && "$(cat "$marker")" == "$(_pom_checksum "$1")" ]]
}

fetch_jars() {
  local pom="$1" libs="$2" what="$3"
  if _jars_fetched "$pom" "$libs"; then return 0; fi
  mkdir -p "$(dirname "$libs")"
  # Serialise concurrent fetches (parallel CI jobs or test workers sharing a cache); the
  # lock fd closes when _fetch_jars_locked returns.
  _fetch_jars_locked "$pom" "$libs" "$what" 8>"$(dirname "$libs")/.fetch.lock"
}

_fetch_jars_locked() {
  local pom="$1" libs="$2" what="$3"
  flock 8
  if _jars_fetched "$pom" "$libs"; then return 0; fi
  command -v mvn >/dev/null || die "mvn not on PATH; needed once to fetch the $what jars"
  echo "fetching the $what jars into $libs" >&2
  rm -rf "$libs.partial"
  # Output is shown only on failure: even with -q, Debian's Maven prints ANSI resets.
  local mvn_output
  if ! mvn_output="$(mvn -q -B -f "$pom" dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$libs.partial" 2>&1)"; then
    echo "$mvn_output" >&2
    die "maven could not fetch the $what jars"
  fi
  rm -rf "$libs"
  mv "$libs.partial" "$libs"
  _pom_checksum "$pom" >"$(_jars_marker "$libs")"
}
