"""One serving instance for the routing tests, run as its own process.

    python instance.py <state_dir> <port> <cluster json> <lag json>

It first hosts its partitions as running actives to write the test data (every instance
writes the same data, so a standby holds what its active holds), then installs the real
cluster layout through the static assignment provider, serves HTTP on 127.0.0.1:<port>,
prints "ready", and runs until killed.
"""

import json
import sys
import time

from iqstate_http import start_background

from iqstate import ACTIVE, STANDBY, Application, Assignment, HostInfo, StaticAssignment

state_dir, port, layout, lags = (
    sys.argv[1],
    int(sys.argv[2]),
    json.loads(sys.argv[3]),
    json.loads(sys.argv[4]),
)
me = HostInfo("127.0.0.1", port)
cluster = {
    HostInfo.parse(host): Assignment(
        {
            store: {int(p): ACTIVE if role == "active" else STANDBY for p, role in parts.items()}
            for store, parts in stores.items()
        }
    )
    for host, stores in layout.items()
}
mine = cluster[me]
writing = StaticAssignment(
    {me: Assignment({s: dict.fromkeys(parts, ACTIVE) for s, parts in mine.roles.items()})},
    end_offsets={
        (s, int(p)): lag for s, parts in lags.get(str(me), {}).items() for p, lag in parts.items()
    },
)
app = Application("routing", state_dir, application_server=str(me), assignment=writing)
app.key_value_store("counts", 4, value_serde="int64")
app.start()
with app.begin_batch(position={"src": {0: 100}}, batch_id=1, stores=["counts"]) as batch:
    batch.put_all("counts", [(f"key-{i}", i) for i in range(40)])
writing.rebalance(cluster)
server = start_background(app, port=port)
print("ready", flush=True)
while True:
    time.sleep(1)
