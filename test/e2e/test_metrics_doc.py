"""docs/metrics.md against what the product broker exposes (ctest metrics_doc): every
family the broker exposes is documented with its type and labels, and every
documented family is exposed. Fails in both directions, so adding a metric
without documenting it (or leaving a removed one in the doc) breaks the build."""

import re
import unittest

from harness import Broker
from qsupport import Client, Q, uniq, wait_until
from test_sideport_metrics import Scrape, documented

SUFFIXES = ("_bucket", "_sum", "_count")


class MetricsDoc(unittest.TestCase):
    def test_doc_matches_the_broker(self):
        with Broker("product", db="e2e_metrics_doc", env={"QUEEN_METRICS_REFRESH_MS": "1000"}) as b:
            # some traffic, so that labelled families have series whose labels can be compared
            c = Client(b.channel())
            q = uniq("doc")
            c.push(q, [b"x"] * 3, txns=["a", "b", "c"])
            p = c.pop(q, consumer_group="g", batch=1)
            c.ack([Q.AckItem(partition_id=p.messages[0].partition_id, offset=p.messages[0].offset,
                             lease_id=p.lease_id)], group="g")
            # a refresh of a pass of the stats walk that met the queue and its group
            s = wait_until(lambda: (lambda s: s.get("queen_consumer_group_lag_messages", queue=q, group="g") == 2
                                    and s)(Scrape(b.http_port)), timeout=20, what="a per-queue refresh")
            c.close()

        exposed = dict(s.types)
        labels = {}
        for line in s.text.splitlines():
            m = re.match(r"^([a-z_:][a-z0-9_:]*)(?:\{(.*)\})? ", line)
            if not m:
                continue
            name = m.group(1)
            fam = name
            if name not in exposed:
                for suf in SUFFIXES:
                    if name.endswith(suf) and name[:-len(suf)] in exposed:
                        fam = name[:-len(suf)]
            keys = tuple(k for k in re.findall(r'([a-z_]+)="', m.group(2) or "") if k != "le")
            labels.setdefault(fam, set()).add(keys)

        doc = {name: (typ, lbl) for name, typ, lbl in documented()}
        missing_in_doc = sorted(set(exposed) - set(doc))
        missing_in_broker = sorted(set(doc) - set(exposed))
        self.assertEqual(missing_in_doc, [], "exposed by the broker but not in docs/metrics.md")
        self.assertEqual(missing_in_broker, [], "in docs/metrics.md but not exposed by the broker")
        wrong_type = sorted(n for n in doc if doc[n][0] != exposed[n])
        self.assertEqual(wrong_type, [], "types differ between docs/metrics.md and the broker")
        checked = 0
        for name, (typ, lbl) in doc.items():
            for keys in labels.get(name, ()):
                self.assertEqual(keys, lbl, "labels of %s" % name)
                checked += 1
        self.assertGreater(checked, 40)


if __name__ == "__main__":
    unittest.main()
