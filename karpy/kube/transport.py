"""kubernetes-asyncio's transport and config loaders, without its generated API.

karpy uses four things from kubernetes-asyncio: ``Configuration``, ``ApiClient`` (its aiohttp pool and
``call_api``), ``load_kube_config`` and ``load_incluster_config`` (authentication: client certificates, tokens,
exec plugins, in-cluster service accounts). Importing any of them the ordinary way runs the package
``__init__`` files, which import the whole generated client: about 850 modules of API and model classes,
~32 MiB of resident memory in the controller, none of which karpy uses (it sends and parses plain JSON,
:mod:`karpy.kube.client`).

:func:`load` imports only the modules behind those four names. It registers ``kubernetes_asyncio``,
``kubernetes_asyncio.client`` and ``kubernetes_asyncio.client.models`` as *deferred packages* before
importing ``kubernetes_asyncio.client.configuration``, ``.api_client`` and ``kubernetes_asyncio.config``: a
deferred package is the real package module (its own spec and ``__path__``, so submodules import as usual)
whose ``__init__`` has not run yet. The first lookup of any other attribute (``kubernetes_asyncio.client.V1Pod``,
``from kubernetes_asyncio.client import CoreV1Api``) runs the real ``__init__`` in place and answers from it,
so code that wants the full client (a test, a script in the same process) still gets it, just not for free.
If the package is already imported in full, :func:`load` changes nothing.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any

import attrs

# The packages whose __init__ imports the generated API/models; outermost first.
DEFERRED_PACKAGES = ("kubernetes_asyncio", "kubernetes_asyncio.client", "kubernetes_asyncio.client.models")


class DeferredPackage(types.ModuleType):
    """A package module whose ``__init__`` runs on the first lookup of a name it does not have yet.

    A name that is a submodule imports only that submodule (the import system's ``from pkg import sub`` asks
    the package first). Any other name, dunders included (``__version__``, ``__all__``), runs the ``__init__``.
    """

    def __getattr__(self, name: str) -> Any:
        submodule = f"{self.__name__}.{name}"
        if importlib.util.find_spec(submodule) is not None:
            return importlib.import_module(submodule)
        spec = self.__spec__
        assert spec is not None and spec.loader is not None
        self.__class__ = types.ModuleType  # type: ignore[assignment] # from now on an ordinary module: no second __init__
        spec.loader.exec_module(self)
        return getattr(self, name)


def _defer(name: str) -> None:
    """Register package ``name`` as a :class:`DeferredPackage` (nothing when already imported)."""
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.submodule_search_locations is None:
        raise ImportError(f"no package {name}", name=name)
    module = DeferredPackage(name)
    module.__spec__ = spec
    module.__loader__ = spec.loader
    module.__file__ = spec.origin
    module.__path__ = list(spec.submodule_search_locations)
    module.__package__ = name
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)


@attrs.frozen
class Transport:
    """kubernetes-asyncio's names karpy uses (typed ``Any``: the library ships no stubs).

    ``Configuration`` and ``ApiClient`` (classes), ``load_kube_config`` (coroutine function: ``config_file``,
    ``client_configuration``), ``load_incluster_config`` (function: ``client_configuration``).
    """

    Configuration: Any
    ApiClient: Any
    load_kube_config: Any
    load_incluster_config: Any


def load() -> Transport:
    """Import kubernetes-asyncio's configuration, ``ApiClient`` and config loaders without its generated API.

    Raises:
        ImportError: kubernetes-asyncio is not installed.
    """
    for name in DEFERRED_PACKAGES:
        _defer(name)
    configuration = importlib.import_module("kubernetes_asyncio.client.configuration")
    api_client = importlib.import_module("kubernetes_asyncio.client.api_client")
    client = sys.modules["kubernetes_asyncio.client"]
    # kubernetes_asyncio.config's loaders import these two names from the client package; they are the very
    # objects its __init__ exports, so setting them now leaves the package as it would be.
    setattr(client, "Configuration", configuration.Configuration)  # noqa: B010 - a module mypy cannot see into
    setattr(client, "ApiClient", api_client.ApiClient)  # noqa: B010
    incluster = importlib.import_module("kubernetes_asyncio.config.incluster_config")
    kube_config = importlib.import_module("kubernetes_asyncio.config.kube_config")
    return Transport(
        Configuration=configuration.Configuration,
        ApiClient=api_client.ApiClient,
        load_kube_config=kube_config.load_kube_config,
        load_incluster_config=incluster.load_incluster_config,
    )
