#!/usr/bin/env bash
# Unpack the bundle that build_bundle.py made, on the CUDA machine:
#   /tmp/vt     0.27.1 patched by `apply` (the PR's edits and the fixes): its
#               vllm/ tree, its METADATA and its .so
#   /tmp/vtpr   0.27.1 patched by `apply --only-pr` (a copy of /tmp/vt with
#               the only-pr overlay: its files written, `.removed` deleted)
#   /tmp/vtp    0.27.1 as it ships (the same, with the pristine overlay)
#   /tmp/vt28   upstream 0.28.0's tree, METADATA and .so
#   /tmp/vtnew  the newest upstream release's tree, METADATA and .so
#   /tmp/site   the wheels, shared by all
#   /tmp/sitenew the newest release's own wheels, before /tmp/site for it only,
#               and the CuTe DSL it needs (pieces in new/ and dsl-N/)
# Each tree complete here gets TREE/.pythonpath: one line, the PYTHONPATH
# entries that run it (/tmp/vtnew's: /tmp/vtnew:/tmp/sitenew:/tmp/site), and
# /tmp/vtnew/.version the release it holds.
# Each part is unpacked only when it was carried along and is not there yet,
# so the parts can be copied over one after the other; so/ before main/,
# since /tmp/vtpr and /tmp/vtp are copies of /tmp/vt with its .so.
#
#     source scripts/gpu/setup_device.sh      # then PYTHONPATH is set (0.27.1)
set -e
bundle=${GPU_BUNDLE:-.cache/gpu-bundle}
if [ -f "$bundle/so/vllm_C.so.xz" ] && { [ ! -f /tmp/vt/vllm/_C_stable_libtorch.abi3.so ] || [ ! -f /tmp/vt28/vllm/_C_stable_libtorch.abi3.so ]; }; then
    python3 - "$bundle/so/vllm_C.so.xz" "$bundle/so/sizes.json" <<'EOF'
import json, lzma, os, sys
roots = {"0.27.1": "/tmp/vt", "0.28.0": "/tmp/vt28"}
with lzma.open(sys.argv[1]) as src:
    for entry in json.load(open(sys.argv[2])):
        target = os.path.join(roots[entry["version"]], "vllm", "_C_stable_libtorch.abi3.so")
        os.makedirs(os.path.dirname(target), exist_ok=True)
        left = entry["bytes"]
        with open(target + ".partial", "wb") as dst:
            while left:
                chunk = src.read(min(left, 1 << 22))
                if not chunk:
                    raise SystemExit(f"{sys.argv[1]} ends early")
                dst.write(chunk)
                left -= len(chunk)
        os.rename(target + ".partial", target)
        print("unpacked", target, entry["bytes"], "bytes")
EOF
fi
if [ -f "$bundle/main/vllm-tree.zip" ] && [ ! -f /tmp/vt/.tree-complete ]; then
    mkdir -p /tmp/vt
    python3 -m zipfile -e "$bundle/main/vllm-tree.zip" /tmp/vt
    touch /tmp/vt/.tree-complete
    echo "unpacked the patched vllm tree into /tmp/vt"
fi
if [ -f "$bundle/main/vllm-tree-0.28.0.zip" ] && [ ! -f /tmp/vt28/.tree-complete ]; then
    mkdir -p /tmp/vt28
    python3 -m zipfile -e "$bundle/main/vllm-tree-0.28.0.zip" /tmp/vt28
    touch /tmp/vt28/.tree-complete
    echo "unpacked upstream 0.28.0's vllm tree into /tmp/vt28"
fi
overlay() {  # overlay ZIP BASE TREE: TREE = a copy of BASE, ZIP's files written, its .removed deleted
    rm -rf "$3"
    cp -a "$2" "$3"
    rm -f "$3/.tree-complete" "$3/.pythonpath"
    find "$3" -name __pycache__ -prune -exec rm -rf {} +
    python3 -m zipfile -e "$1" "$3"
    (cd "$3" && xargs -r rm -f < .removed && rm .removed)
    find "$3/vllm" -depth -type d -empty -delete
    touch "$3/.tree-complete"
}
for set in only-pr pristine; do
    tree=/tmp/vtp; [ $set = only-pr ] && tree=/tmp/vtpr
    if [ -f "$bundle/main/vllm-0.27.1-$set.zip" ] && [ -f /tmp/vt/.tree-complete ] \
            && [ -f /tmp/vt/vllm/_C_stable_libtorch.abi3.so ] && [ ! -f $tree/.tree-complete ]; then
        overlay "$bundle/main/vllm-0.27.1-$set.zip" /tmp/vt $tree
        echo "made the $set 0.27.1 tree in $tree"
    fi
done
new_so=$(ls "$bundle"/new-so/vllm_C.so.xz "$bundle"/new/vllm_C.so.xz 2>/dev/null | head -1)
if [ -n "$new_so" ] && [ ! -f /tmp/vtnew/vllm/_C_stable_libtorch.abi3.so ]; then
    mkdir -p /tmp/vtnew/vllm
    python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'), 1 << 22)" \
        "$new_so" /tmp/vtnew/vllm/_C_stable_libtorch.abi3.so.partial \
        && mv /tmp/vtnew/vllm/_C_stable_libtorch.abi3.so.partial /tmp/vtnew/vllm/_C_stable_libtorch.abi3.so \
        && echo "unpacked /tmp/vtnew/vllm/_C_stable_libtorch.abi3.so"
fi
if [ -f "$bundle/new/version.txt" ] && [ ! -f /tmp/vtnew/.tree-complete ]; then
    new_version=$(cat "$bundle/new/version.txt")
    mkdir -p /tmp/vtnew
    python3 -m zipfile -e "$bundle/new/vllm-tree-$new_version.zip" /tmp/vtnew
    echo "$new_version" > /tmp/vtnew/.version
    touch /tmp/vtnew/.tree-complete
    echo "unpacked upstream $new_version's vllm tree into /tmp/vtnew"
fi
if [ -d "$bundle/new/wheels" ] && [ ! -f /tmp/sitenew/.complete ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --target /tmp/sitenew "$bundle"/new/wheels/*.whl
    touch /tmp/sitenew/.complete
    echo "installed $(ls "$bundle"/new/wheels | wc -l) wheels into /tmp/sitenew"
fi
# The CuTe DSL comes in pieces over new/ and dsl-N/, which may travel in
# different calls: each is kept in /tmp/dsl-pieces when it arrives, and once
# every piece new/cute-dsl.json lists is there they are unpacked together.
assemble_pieces() {  # assemble_pieces PIECES DEST: unpack PIECES/cute-dsl.json's stream into DEST
    python3 - "$1" "$2" <<'EOF'
import hashlib, json, os, sys, tarfile
pieces, dest = sys.argv[1:]
listing = json.load(open(os.path.join(pieces, "cute-dsl.json")))
missing = [p["name"] for p in listing["pieces"]
           if not os.path.isfile(os.path.join(pieces, p["name"]))
           or os.path.getsize(os.path.join(pieces, p["name"])) != p["bytes"]]
if missing:
    print("CuTe DSL: waiting for", *missing)
    sys.exit(0)

class Chain:  # the pieces read as one stream, hashed on the way
    def __init__(self, names):
        self.files = [open(os.path.join(pieces, n), "rb") for n in names]
        self.hash = hashlib.sha256()
    def read(self, size=-1):
        while self.files:
            data = self.files[0].read(size)
            if data:
                self.hash.update(data)
                return data
            self.files.pop(0).close()
        return b""

stream = Chain([p["name"] for p in listing["pieces"]])
os.makedirs(dest, exist_ok=True)
with tarfile.open(fileobj=stream, mode="r|xz") as archive:
    archive.extractall(dest, filter="tar")
stream.read()
if stream.hash.hexdigest() != listing["sha256"]:
    sys.exit("CuTe DSL: the pieces do not make the stream that was cut")
open(os.path.join(dest, ".dsl-complete"), "w").close()
print("unpacked the CuTe DSL into", dest)
EOF
}
if [ ! -f /tmp/sitenew/.dsl-complete ]; then
    for piece in "$bundle"/new/cute-dsl.* "$bundle"/dsl-*/cute-dsl.*; do
        if [ -f "$piece" ] && [ ! -f "/tmp/dsl-pieces/${piece##*/}" ]; then
            mkdir -p /tmp/dsl-pieces && cp "$piece" /tmp/dsl-pieces/
        fi
    done
    if [ -f /tmp/dsl-pieces/cute-dsl.json ]; then
        assemble_pieces /tmp/dsl-pieces /tmp/sitenew
        [ -f /tmp/sitenew/.dsl-complete ] && rm -rf /tmp/dsl-pieces
    fi
fi
if [ -d "$bundle/main/wheels" ] && [ ! -f /tmp/site/.complete ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --target /tmp/site "$bundle"/main/wheels/*.whl
    touch /tmp/site/.complete
    echo "installed $(ls "$bundle"/main/wheels | wc -l) wheels into /tmp/site"
fi
for tree in /tmp/vt /tmp/vtpr /tmp/vtp /tmp/vt28 /tmp/vtnew; do
    if [ -f $tree/.tree-complete ] && [ -f $tree/vllm/_C_stable_libtorch.abi3.so ]; then
        # The CuTe DSL's own path comes from a .pth file, which PYTHONPATH
        # entries do not read: it is named here where it was unpacked.
        cute=/tmp/sitenew/nvidia_cutlass_dsl/dsl_packages
        if [ $tree = /tmp/vtnew ]; then
            echo /tmp/vtnew:/tmp/sitenew$( [ -d $cute ] && echo :$cute ):/tmp/site
        else echo $tree:/tmp/site; fi > $tree/.pythonpath
    fi
done
set +e
export PYTHONPATH=/tmp/vt:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
export VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1
# NVLink multicast stays off, in every process started from here.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
