# Sourced by served_path.sh and served_profile.sh once $mode (bf16 or fp8), $out and
# $checkpoint are set: `flags`, the engine flags of the mode (FP8 weights and an fp8 KV
# cache for fp8); `pagoda`, the command without the console script; and `start_server`,
# which starts `pagoda serve` on $checkpoint at the served path's settings and waits until
# it answers. $server is the server's own pid (not a subshell's), so `kill $server` stops it.
cli=(python -c 'import sys; from pagoda.cli import main; sys.exit(main())')
pagoda() { "${cli[@]}" "$@"; }
flags=()
[ "$mode" = fp8 ] && flags=(--quantization fp8 --kv-cache-dtype fp8)

start_server() {
    curl -sf http://127.0.0.1:8000/health >/dev/null && { echo "port 8000 is taken"; exit 1; }
    "${cli[@]}" serve "$checkpoint" --port 8000 --served-model-name llama8b "${flags[@]}" \
        --max-num-seqs 256 --max-num-batched-tokens 8192 --max-model-len 4096 \
        --gpu-memory-utilization 0.9 >"$out/server-$mode.log" 2>&1 &
    server=$!
    for _ in $(seq 300); do
        curl -sf http://127.0.0.1:8000/health >/dev/null && return
        kill -0 $server 2>/dev/null || { tail -n 20 "$out/server-$mode.log"; exit 1; }
        sleep 1
    done
    echo "pagoda serve did not answer within 300 s"; exit 1
}
