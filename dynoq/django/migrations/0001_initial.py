from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True
    dependencies: list[tuple[str, str]] = []
    operations = [
        migrations.CreateModel(
            name="Outbox",
            fields=[
                ("id", models.CharField(max_length=64, primary_key=True, serialize=False)),
                ("queue", models.CharField(max_length=200)),
                ("created", models.DateTimeField(auto_now_add=True, db_index=True)),
            ],
            options={"db_table": "dynoq_outbox"},
        ),
    ]
