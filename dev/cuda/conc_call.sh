#!/usr/bin/env bash
# The A/B of dev/cuda/lat_conc.patch (issue 14: batches of 9-48 as groups of 8 two at a time on half-GPU latency
# executors) in one device call on the H200:
#   1. base = the tree as it is (build-cuda, by call_env.sh); side = a copy with the patch (build-conc)
#   2. the side's tests: test_executors (DD_TEST_QUICK=1: groups of 7/7/6 and 6/5 against the frame kernel, logit
#      bits and codes), test_invariance (a stream alone == inside a batch of 12 in groups), test_device_api and
#      test_device_capture (groups inside a stream capture: the side stream forked and joined), test_e2e
#   3. depthdec bench --backend cuda --synthetic gpt|csm --weights bf16 at batches 8 16 32 48, base and side
#      alternating per point (medians of 20 frames), JSON lines into $OUT/conc_bench.jsonl
# Carry build-cuda/{cuobj,obj,tobj} and build-conc/{cuobj,obj,tobj} when prebuilt here (make CUDA=1 CUDA_ARCH=sm_90
# BUILD=build-cuda tests in the tree and in a patched copy, then copy its build-cuda to build-conc), and .debs/.
#   4. dev/cuda/derisk/run.sh tput_linear (its us_pdl column: the linear as programmatic dependent launches)
# Writes $OUT/summary.txt, $OUT/conc_bench.jsonl and $OUT/work.tgz (~8 min).   OUT=$OUT bash dev/cuda/conc_call.sh
CALL=conc source "$(dirname "$0")/call_env.sh"
C=/tmp/conc_tree
rm -rf "$C" && mkdir -p "$C"
tar cf - --exclude=./build-cuda --exclude=./.git --exclude=./.raysite . | (cd "$C" && tar xf -)
(cd "$C" && patch -p1 --forward --quiet <"$OLDPWD/dev/cuda/lat_conc.patch") || { log "lat_conc.patch does not apply"; exit 1; }
[ -d build-conc ] && cp -r build-conc "$C/build-cuda" && find "$C/build-cuda" -type f -exec touch {} +
(cd "$C" && make CUDA=1 CUDA_ARCH=sm_90 BUILD=build-cuda -j16 tests) >"$R/build_conc.log" 2>&1
log "build of the patched side rc $? ($(el))"
SB=$C/build-cuda
for t in test_executors test_invariance test_device_api test_device_capture test_e2e; do
    DD_TEST_QUICK=1 DD_TEST_ONLY=$t timeout 150 "$SB/test_cuda" >"$R/side_$t.log" 2>&1
    log "side $t (quick 1) rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$R/side_$t.log" | tr '\n' ' ') ($(el))"
    grep -E "^\[  FAILED|^\[   LINE|ERROR" "$R/side_$t.log" | head -4 | tee -a "$S"
done
for m in gpt csm; do
    for n in 8 16 32 48; do
        for side in base conc; do
            dd=$B/depthdec
            [ $side = conc ] && dd=$SB/depthdec
            timeout 90 "$dd" bench --backend cuda --synthetic $m --weights bf16 --batch $n --frames 20 --json /tmp/cb.json \
                >/dev/null 2>&1 &&
                python3 -c "import json,sys; d=json.load(open('/tmp/cb.json')); d['side']=sys.argv[1]; print(json.dumps(d))" \
                    $side >>"$OUT/conc_bench.jsonl"
            log "$m B$n $side: $(python3 -c "import json;print(json.load(open('/tmp/cb.json'))['ms_per_frame'])" 2>&1 | tail -1) ms/frame ($(el))"
            rm -f /tmp/cb.json
        done
    done
done
# issue 14's other question: the wgmma linear as programmatic dependent launches (tput_linear's us_pdl column)
OUT=$R/derisk timeout 150 bash dev/cuda/derisk/run.sh tput_linear >/dev/null 2>&1
log "derisk tput_linear rc $? ($(el)):"
grep -E "^RESULT tput_linear(64)? shape=(qkv|out|fc1|fc2) T=256|^SUMMARY|^FAIL" "$R/derisk/derisk.txt" | head -16 | tee -a "$S"
(cd "$OUT" && tar czf work.tgz work && rm -rf work)
log "# done $(date -u +%FT%TZ)"
