from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True
    dependencies = []
    operations = [
        migrations.CreateModel(
            name="Order",
            fields=[
                ("id", models.AutoField(primary_key=True, serialize=False)),
                ("ref", models.CharField(max_length=50, unique=True)),
            ],
        ),
        migrations.CreateModel(
            name="Run",
            fields=[
                ("id", models.AutoField(primary_key=True, serialize=False)),
                ("task", models.CharField(max_length=50)),
                ("ref", models.CharField(max_length=50)),
            ],
        ),
    ]
