from django.http import HttpRequest, HttpResponse
from django.urls import path


def home(request: HttpRequest) -> HttpResponse:
    return HttpResponse(f"shop home, user {request.user}")


urlpatterns = [path("", home)]
