#!/usr/bin/env bash
# What the hack/*-down.sh scripts share besides stopping processes: their one argument, --purge,
# and the state directory they stop and may delete.

# util::down_args ARG...: parses a *-down.sh script's arguments: sets PURGE to 1 for --purge
# (else 0); -h/--help prints lines 2-10 of the script (its header) and exits 0; anything else
# exits 2 with a usage line.
# shellcheck disable=SC2034 # PURGE is read by the script
util::down_args() {
	local arg
	PURGE=0
	for arg in "$@"; do
		case "${arg}" in
		--purge) PURGE=1 ;;
		-h | --help)
			sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
			exit 0
			;;
		*)
			log::info "unknown argument ${arg} (usage: hack/${LOG_NAME}.sh [--purge])"
			exit 2
			;;
		esac
	done
}

# util::state_dir VAR: the state directory named by the variable VAR, for a *-down.sh script:
# exits 0 with "nothing to do" when it does not exist, else sets VAR to its absolute path.
util::state_dir() {
	local -n dir="$1"
	if [[ ! -d "${dir}" ]]; then
		log::info "nothing to do: ${dir} does not exist"
		exit 0
	fi
	dir="$(cd "${dir}" && pwd)"
}

# util::purge DIR WHAT MARKER...: deletes DIR (--purge) and logs it, but only when DIR is not /
# and at least one of the MARKER paths (relative to DIR) exists, so that a mistyped *_DIR does
# not delete someone else's directory. Refuses with "DIR does not look like WHAT" and returns
# 1 otherwise; WHAT says which markers were looked for.
util::purge() {
	local dir="$1" what="$2" marker found=0
	shift 2
	for marker in "$@"; do
		[[ -e "${dir}/${marker}" ]] && found=1
	done
	if [[ "${dir}" == "/" ]] || ((!found)); then
		log::error "${dir} does not look like ${what}: not deleting it"
		return 1
	fi
	rm -rf -- "${dir}"
	log::info "deleted ${dir}"
}
