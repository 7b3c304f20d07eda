"""The project's ASGI app: Django, with dynoq's dashboard at /ops/queues/ for staff."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")
django_app = get_asgi_application()  # sets Django up first

from dynoq.django.dashboard import mount  # noqa: E402

application = mount(django_app, "/ops/queues")
