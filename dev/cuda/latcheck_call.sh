#!/usr/bin/env bash
# The latency kernel's checks after a lat.cu change, the most telling first (for a call with little device time
# left): test_executors unquick, compute-sanitizer memcheck (quick 2), racecheck (quick 3) and initcheck (quick 2) on
# it, then test_cuda all (quick). Carry build-cuda/{cuobj,obj,tobj} and .debs (built here, dev/cuda/stamp.sh);
# CAP_S skips a step that would pass it.     OUT=$OUT CAP_S=400 bash dev/cuda/latcheck_call.sh
CALL=latcheck source "$(dirname "$0")/call_env.sh"
unset DD_TEST_QUICK
fits 60 "test_executors" && cuda_test executors_full $B/test_cuda test_executors 150
for tq in memcheck:2 racecheck:3 initcheck:2; do
    fits 90 "${tq%:*} test_executors" && exec_san ${tq%:*} ${tq#*:}
done
fits 60 "test_cuda all quick" && cuda_test all_quick $B/test_cuda "" 150 DD_TEST_QUICK=1 DD_TEST_ONLY=
(cd "$OUT" && tar czf work.tgz work && rm -rf work)
log "# done $(date -u +%FT%TZ) ($(el))"
