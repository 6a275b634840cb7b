"""The HTTP layer: one controller module per resource; each handler parses the request, calls
one registry service method and shapes the response. Errors are raised, never rendered here
(``api.errors`` maps them to the envelope). ``ROUTE_HANDLERS`` is what ``create_app`` mounts.
"""

from hub_server.api.blobs import BlobController
from hub_server.api.catalog import CatalogController
from hub_server.api.chains import ChainController
from hub_server.api.chunks import ChunkController
from hub_server.api.fleet import FleetController
from hub_server.api.manifests import ManifestController
from hub_server.api.oci_catalog import OciCatalogController
from hub_server.api.quotas import QuotaController
from hub_server.api.referrers import ReferrerController
from hub_server.api.system import SystemController
from hub_server.api.tags import TagController
from hub_server.api.token import TokenController
from hub_server.api.tokens import AccountController
from hub_server.api.uploads import UploadController
from hub_server.api.webhooks import WebhookController

ROUTE_HANDLERS = [
    SystemController,
    TokenController,
    UploadController,
    BlobController,
    ManifestController,
    ReferrerController,
    TagController,
    ChunkController,
    ChainController,
    CatalogController,
    OciCatalogController,
    WebhookController,
    FleetController,
    QuotaController,
    AccountController,
]

__all__ = ["ROUTE_HANDLERS"]
