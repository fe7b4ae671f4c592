"""Audit counting inside the clients: every tier's producer (and the mirror) counts what it sent per topic and
10-minute bucket of event time and publishes the counts to `_audit` (the LinkedIn audit of the paper's
section 4). Reading and reconciling the books is the audit layer's (`ferry.audit`)."""
