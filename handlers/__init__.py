"""One handler per endpoint. The app is assembled from this explicit list; nothing registers later."""

from handlers.admin import AdminHandler
from handlers.ai import AiHandler
from handlers.cache import CacheHandler
from handlers.config import ConfigHandler
from handlers.query import QueryHandler
from handlers.rag import RagHandler
from handlers.stats import StatsHandler

HANDLER_CLASSES = (ConfigHandler, QueryHandler, RagHandler, StatsHandler, AdminHandler, CacheHandler, AiHandler)
