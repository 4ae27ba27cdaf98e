(** Proofs for [Rankrounds]: what a rank's [rank_rounds] holds, and that
    the round of a cut depends only on its pair's cuts, so the two ranks
    of a pair, each numbering its own cuts, agree. *)
From Coq Require Import List Arith Bool Permutation Lia.
From Coq Require Import SetoidList.
From VS Require Import Prelude Rankrounds.
Import ListNotations.

Section Proofs.
Context {A : Type}.
Notation cut := (A * nat * nat * nat)%type.

(** The chunk of each cut by its pair's cuts before it and itself. *)
Fixpoint cspec (budget : nat) (pre l : list cut) : list (nat * cut) :=
  match l with
  | [] => []
  | x :: l' => (fst (runs budget (filter (onpair (csrc x) (cdst x)) (pre ++ [x]))), x)
               :: cspec budget (pre ++ [x]) l'
  end.

Lemma runs_snoc : forall budget (l : list cut) (x : cut),
  runs budget (l ++ [x]) = step budget (runs budget l) (cbytes x).
Proof. intros. unfold runs. rewrite fold_left_app. reflexivity. Qed.

Lemma onpair_key : forall m a b (x : cut), b < m -> cdst x < m ->
  (csrc x * m + cdst x =? a * m + b) = onpair a b x.
Proof.
  intros m a b x Hb Hx. unfold onpair.
  destruct (Nat.eqb_spec (csrc x * m + cdst x) (a * m + b)) as [E|E].
  - destruct (Nat.div_mod_unique m (csrc x) a (cdst x) b Hx Hb) as [E1 E2]; [lia|].
    rewrite E1, E2, !Nat.eqb_refl. reflexivity.
  - destruct (Nat.eqb_spec (csrc x) a); destruct (Nat.eqb_spec (cdst x) b); simpl; auto.
Qed.

Lemma onpair_self : forall x : cut, onpair (csrc x) (cdst x) x = true.
Proof. intros. unfold onpair. rewrite !Nat.eqb_refl. reflexivity. Qed.

Lemma chunks_spec : forall m budget (l pre : list cut) M,
  (forall a b, b < m -> find_or (0, 0) (a * m + b) M = runs budget (filter (onpair a b) pre)) ->
  (forall x, In x l -> cdst x < m) ->
  chunks m budget M l = cspec budget pre l.
Proof.
  intros m budget l. induction l as [|x l IH]; intros pre M HM Hl; simpl; [reflexivity|].
  assert (Hx : cdst x < m) by (apply Hl; left; reflexivity).
  rewrite HM by exact Hx.
  rewrite filter_app. simpl. rewrite onpair_self.
  rewrite runs_snoc. f_equal.
  apply IH; [|intros; apply Hl; right; assumption].
  intros a b Hb. rewrite find_or_add, onpair_key by assumption.
  rewrite filter_app. simpl. destruct (onpair a b x) eqn:E.
  - unfold onpair in E. apply andb_prop in E as [E1 E2].
    apply Nat.eqb_eq in E1, E2. subst. rewrite runs_snoc. reflexivity.
  - rewrite app_nil_r. apply HM. exact Hb.
Qed.

Lemma filter_idem : forall (f : cut -> bool) l, filter f (filter f l) = filter f l.
Proof.
  intros f l. induction l as [|x l IH]; simpl; auto.
  destruct (f x) eqn:E; simpl; rewrite ?E, IH; reflexivity.
Qed.

Lemma filter_comm : forall (f g : cut -> bool) l, filter f (filter g l) = filter g (filter f l).
Proof.
  intros f g l. induction l as [|x l IH]; simpl; auto.
  destruct (g x) eqn:G; destruct (f x) eqn:F; simpl; rewrite ?G, ?F, IH; reflexivity.
Qed.

(** The chunks of a pair's cuts are those of the pair's cuts alone. *)
Lemma cspec_pair : forall budget a b (l pre : list cut),
  filter (fun p => onpair a b (snd p)) (cspec budget pre l)
  = cspec budget (filter (onpair a b) pre) (filter (onpair a b) l).
Proof.
  intros budget a b l. induction l as [|x l IH]; intros pre; simpl; [reflexivity|].
  destruct (onpair a b x) eqn:E; simpl.
  - rewrite IH, !filter_app. simpl. rewrite E, onpair_self.
    unfold onpair in E. apply andb_prop in E as [E1 E2]. apply Nat.eqb_eq in E1, E2.
    rewrite E1, E2, filter_idem. reflexivity.
  - rewrite IH, filter_app. simpl. rewrite E, app_nil_r. reflexivity.
Qed.

Lemma cspec_snd : forall budget (l pre : list cut), map snd (cspec budget pre l) = l.
Proof. intros budget l. induction l; intros; simpl; f_equal; auto. Qed.

Lemma maxdst_bound : forall (l : list cut) x, In x l -> cdst x < S (maxdst l).
Proof.
  intros l. induction l as [|y l IH]; intros x H; simpl in *; [contradiction|].
  destruct H as [<-|H]; [lia|]. specialize (IH x H). lia.
Qed.

(** The round number of each moving cut, from its pair's cuts up to it. *)
Definition nspec (world budget : nat) (l : list cut) : list (nat * cut) :=
  map (fun kx => (rid (width world) (fst kx) (csrc (snd kx)) (cdst (snd kx)), snd kx))
      (cspec budget [] (moving l)).

Lemma numbered_spec : forall world budget (l : list cut), numbered world budget l = nspec world budget l.
Proof.
  intros. unfold numbered, nspec. f_equal. apply chunks_spec.
  - intros a b _. rewrite find_or_empty. reflexivity.
  - intros x H. apply maxdst_bound. exact H.
Qed.

Lemma numbered_snd : forall world budget (l : list cut), map snd (numbered world budget l) = moving l.
Proof.
  intros. rewrite numbered_spec. unfold nspec. rewrite map_map. simpl. apply cspec_snd.
Qed.

Lemma filter_map_swap : forall {B C} (f : C -> bool) (g : B -> C) (l : list B),
  filter f (map g l) = map g (filter (fun x => f (g x)) l).
Proof. intros. induction l as [|x l IH]; simpl; auto. destruct (f (g x)); simpl; rewrite IH; reflexivity. Qed.

(** Both sides agree: the numbered cuts of a pair depend only on that pair's cuts. *)
Theorem numbered_agree : forall world budget a b (l1 l2 : list cut),
  filter (onpair a b) l1 = filter (onpair a b) l2 ->
  filter (fun p => onpair a b (snd p)) (numbered world budget l1)
  = filter (fun p => onpair a b (snd p)) (numbered world budget l2).
Proof.
  intros world budget a b l1 l2 H. rewrite !numbered_spec. unfold nspec.
  rewrite !filter_map_swap. simpl.
  assert (K : forall l, filter (fun x => onpair a b (snd x)) (cspec budget [] (moving l))
                        = cspec budget [] (moving (filter (onpair a b) l))).
  { intros l. rewrite cspec_pair. simpl. unfold moving. rewrite filter_comm. reflexivity. }
  rewrite !K, H. reflexivity.
Qed.

(** Bucketing: the cuts of round [t], reversed, ahead of what [M] held. *)
Lemma bucket_spec : forall (l : list (nat * cut)) M t,
  find_or [] t (bucket M l) = rev (map snd (filter (fun p => fst p =? t) l)) ++ find_or [] t M.
Proof.
  intros l. induction l as [|[t0 x] l IH]; intros M t; simpl; [reflexivity|].
  rewrite IH, find_or_add. destruct (Nat.eqb_spec t0 t) as [E|E]; simpl.
  - subst. rewrite <- app_assoc. reflexivity.
  - reflexivity.
Qed.

Lemma rank_rounds_in : forall world budget (l : list cut) t xs,
  In (t, xs) (rank_rounds world budget l) ->
  exists ys, xs = rev ys /\ NatMap.find t (bucket (NatMap.empty _) (numbered world budget l)) = Some ys.
Proof.
  intros world budget l t xs H. unfold rank_rounds in H. apply in_map_iff in H as [[t' ys] [E H]].
  simpl in E. injection E as <- <-. exists ys. split; [reflexivity|].
  apply NatMapFacts.find_mapsto_iff. apply NatMapFacts.elements_mapsto_iff.
  apply InA_alt. exists (t', ys). split; [split; reflexivity|exact H].
Qed.

(** Round [t] of a rank holds exactly its cuts numbered [t], in the order given. *)
Theorem rank_rounds_round : forall world budget (l : list cut) t xs,
  In (t, xs) (rank_rounds world budget l) ->
  xs = map snd (filter (fun p => fst p =? t) (numbered world budget l)).
Proof.
  intros world budget l t xs H. destruct (rank_rounds_in _ _ _ _ _ H) as [ys [-> F]].
  assert (G := bucket_spec (numbered world budget l) (NatMap.empty _) t).
  unfold find_or in G. rewrite F, NatMapFacts.empty_o, app_nil_r in G. subst ys.
  apply rev_involutive.
Qed.

(** Every moving cut is in the round of its number. *)
Lemma rank_rounds_cover : forall world budget (l : list cut) t x,
  In (t, x) (numbered world budget l) ->
  exists xs, In (t, xs) (rank_rounds world budget l) /\ In x xs.
Proof.
  intros world budget l t x H.
  assert (G := bucket_spec (numbered world budget l) (NatMap.empty _) t).
  rewrite find_or_empty, app_nil_r in G. unfold find_or in G.
  assert (Hin : In x (rev (map snd (filter (fun p => fst p =? t) (numbered world budget l))))).
  { apply in_rev. rewrite rev_involutive. apply in_map_iff. exists (t, x). split; [reflexivity|].
    apply filter_In. split; [exact H|apply Nat.eqb_refl]. }
  destruct (NatMap.find t (bucket (NatMap.empty _) (numbered world budget l))) as [ys|] eqn:F.
  - subst ys. exists (map snd (filter (fun p => fst p =? t) (numbered world budget l))). split.
    + unfold rank_rounds. apply in_map_iff.
      apply NatMapFacts.find_mapsto_iff, NatMapFacts.elements_mapsto_iff, InA_alt in F.
      destruct F as [[t' ys] [[E1 E2] Hy]]. simpl in E1, E2.
      exists (t', ys). split; [|exact Hy]. simpl. rewrite <- E1, <- E2, rev_involutive. reflexivity.
    + apply in_rev. exact Hin.
  - rewrite <- G in Hin. contradiction.
Qed.

Lemma in_rounds_numbered : forall world budget (l : list cut) t xs x,
  In (t, xs) (rank_rounds world budget l) -> In x xs -> In (t, x) (numbered world budget l).
Proof.
  intros world budget l t xs x H Hx. rewrite (rank_rounds_round _ _ _ _ _ H) in Hx.
  apply in_map_iff in Hx as [[t' y] [E Hy]]. simpl in E. subst y.
  apply filter_In in Hy as [Hy Et]. simpl in Et. apply Nat.eqb_eq in Et. subst. exact Hy.
Qed.

(** Both sides of every cut in the same round: two ranks' cut lists with
    the same cuts of the pair [a -> b] in the same order place each such
    cut in the same round, and within every round the pair's cuts are the
    same, in the same order. *)
Theorem rank_rounds_agree : forall world budget a b (l1 l2 : list cut),
  filter (onpair a b) l1 = filter (onpair a b) l2 ->
  (forall t xs x, In (t, xs) (rank_rounds world budget l1) -> In x xs -> onpair a b x = true ->
     exists ys, In (t, ys) (rank_rounds world budget l2) /\ In x ys) /\
  (forall t xs ys, In (t, xs) (rank_rounds world budget l1) -> In (t, ys) (rank_rounds world budget l2) ->
     filter (onpair a b) xs = filter (onpair a b) ys).
Proof.
  intros world budget a b l1 l2 H. assert (N := numbered_agree world budget a b l1 l2 H). split.
  - intros t xs x Hr Hx P. apply rank_rounds_cover.
    assert (I : In (t, x) (filter (fun p => onpair a b (snd p)) (numbered world budget l1))).
    { apply filter_In. split; [exact (in_rounds_numbered _ _ _ _ _ _ Hr Hx)|exact P]. }
    rewrite N in I. apply filter_In in I as [I _]. exact I.
  - intros t xs ys H1 H2. rewrite (rank_rounds_round _ _ _ _ _ H1), (rank_rounds_round _ _ _ _ _ H2).
    assert (K : forall l : list (nat * cut), filter (onpair a b) (map snd (filter (fun p => fst p =? t) l))
               = map snd (filter (fun p => fst p =? t) (filter (fun p => onpair a b (snd p)) l))).
    { intros l. induction l as [|[t' x] l IH]; simpl; auto.
      destruct (t' =? t) eqn:T; destruct (onpair a b x) eqn:P; simpl; rewrite ?T, ?P, ?IH; reflexivity. }
    rewrite !K, N. reflexivity.
Qed.

End Proofs.
