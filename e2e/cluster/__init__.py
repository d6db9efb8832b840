"""The local cluster for tests and the demo: a real control plane on 127.0.0.1, KWOK, moto and a node agent.

- ``build.sh`` builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler and KWOK from Go modules;
- :mod:`e2e.cluster.controlplane` runs them; :mod:`e2e.cluster.aws` runs and seeds moto;
- :mod:`e2e.cluster.nodeagent` (with :mod:`e2e.cluster.kubelet`) plays kubelet and the cloud controller manager;
- ``python -m e2e.cluster up`` supervises all of it; :mod:`e2e.cluster.launcher` starts that from Python
  (the ``local_cluster`` pytest fixture, the demo).
"""
