# Sourced by bench scripts: refuses (exit 2) unless BUILD_DIR holds trident and data/ the corpus.
# require_build BUILD_DIR ROOT: sets `trident` to BUILD_DIR/src/trident.
require_build() {
  trident=$1/src/trident
  if [[ ! -x $trident ]]; then
    echo "error: $trident is missing; build the trident target in $1" >&2
    exit 2
  fi
  if [[ ! -f $2/data/kjv_train.bin || ! -f $2/data/kjv_val.bin ]]; then
    echo "error: data/kjv_{train,val}.bin are missing; run 'make data' or" \
      "'bash tools/prepare_kjv.sh $trident data' in $2" >&2
    exit 2
  fi
}
