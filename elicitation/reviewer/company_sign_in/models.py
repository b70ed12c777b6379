from django.conf import settings
from django.db import models


class CompanyIdentity(models.Model):
    """Who an account is at the company's OpenID Connect provider: the provider's issuer and its `sub` for them.

    A sign-in finds its account by this pair and nothing else: a username or an e-mail address is whatever the
    provider's user (or a local account's owner) chose, so matching on either could hand one person another's account.
    """

    issuer = models.CharField(max_length=500)
    subject = models.CharField(max_length=255)
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="company_identity"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "company identities"
        constraints = [
            models.UniqueConstraint(
                fields=["issuer", "subject"], name="company_identity_one_account_per_subject"
            )
        ]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"
