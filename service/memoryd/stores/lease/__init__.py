"""Leases shared by replicas (the maintenance lease, on Redis).

The port is `memoryd.core.lifecycle.maintenance.Lease`; without Redis a replica is alone
and needs none.
"""
