from django.apps import AppConfig


class CompanySignInConfig(AppConfig):
    name = "elicitation.reviewer.company_sign_in"
    label = "company_sign_in"
    verbose_name = "Company sign-in"
    default_auto_field = "django.db.models.BigAutoField"
