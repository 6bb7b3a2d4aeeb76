# Sourced by the launchers (not run): their shared argument handling.
#   launcher_args "$0" N_HEADER_LINES "$@"   -> sets DRY (0|1) and ARGS (the rest), or exits
#   check_experiment EXPERIMENT              -> exits 2 naming the known ones if it is not one
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

launcher_args() {
  local script="$1" lines="$2"; shift 2
  DRY=0
  case "${1:-}" in
    -h|--help) sed -n "2,${lines}p" "$script" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --dry-run) DRY=1; shift ;;
    ""|-*) sed -n "2,${lines}p" "$script" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
  ARGS=("$@")
}

check_experiment() {
  if [ ! -f "$repo/conf/experiment/$1.yaml" ]; then
    echo "error: no experiment '$1' (conf/experiment/: $(cd "$repo/conf/experiment" && ls ./*.yaml | sed 's|^\./||; s/\.yaml$//' | tr '\n' ' '))" >&2
    exit 2
  fi
}
