"""A small Django project on dynoq's task backend, for tests/test_django.py. Where it
connects and which database it uses come from the environment the test sets:
DYNOQ_URL / DYNOQ_PREFIX (the backend's defaults) and DJANGO_TEST_DB."""

import os

SECRET_KEY = "tests-only"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ALLOWED_HOSTS = ["*"]
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django.contrib.sessions",
    "dynoq.django",
    "shop",
]
if os.environ.get("DJANGO_TEST_PG"):
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": os.environ["DJANGO_TEST_PG"],
            "HOST": "127.0.0.1",
            "USER": "postgres",
        }
    }
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ.get("DJANGO_TEST_DB", "db.sqlite3"),
            "OPTIONS": {"timeout": 30},
        }
    }
ROOT_URLCONF = "mysite.urls"
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
TASKS = {
    "default": {
        "BACKEND": "dynoq.django.DynoqBackend",
        "QUEUES": ["default", "emails", "serial"],
        "OPTIONS": {
            "queue_settings": {"serial": {"shards": 1}},
            "keep_result": 600,
            "check_after": float(os.environ.get("DJANGO_TEST_CHECK_AFTER", "60")),
            "transaction_timeout": float(os.environ.get("DJANGO_TEST_TX_TIMEOUT", "300")),
        },
    }
}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
}
